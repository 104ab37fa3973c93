#include "net/onnx_export.h"

#include <initializer_list>
#include <vector>

#include "net/onnx.pb.h"

namespace stampede::net {

namespace {

constexpr int64_t kOpset = 17;  // ReduceMean still takes its axes as an attribute
constexpr int64_t kIrVersion = 8;

// Builds the graph: every helper adds a node and returns its output's name.
class Graph {
 public:
  Graph(onnx::GraphProto* g, const ParamLayout& layout, std::span<const float> params)
      : g_(g), layout_(layout), params_(params) {}

  // A parameter tensor of the layout, as an initializer named as in the layout.
  std::string Param(const std::string& name) {
    const TensorInfo& t = layout_.Find(name);
    onnx::TensorProto* p = g_->add_initializer();
    p->set_name(name);
    p->set_data_type(onnx::TensorProto::FLOAT);
    for (int d : t.shape) p->add_dims(d);
    p->set_raw_data(reinterpret_cast<const char*>(params_.data() + t.offset), size_t(t.size) * sizeof(float));
    return name;
  }
  std::string Floats(const std::vector<float>& v, const std::vector<int64_t>& dims) {
    onnx::TensorProto* p = g_->add_initializer();
    p->set_name("const" + std::to_string(next_++));
    p->set_data_type(onnx::TensorProto::FLOAT);
    for (int64_t d : dims) p->add_dims(d);
    p->set_raw_data(reinterpret_cast<const char*>(v.data()), v.size() * sizeof(float));
    return p->name();
  }
  std::string Ints(const std::vector<int64_t>& v) {
    onnx::TensorProto* p = g_->add_initializer();
    p->set_name("const" + std::to_string(next_++));
    p->set_data_type(onnx::TensorProto::INT64);
    p->add_dims(int64_t(v.size()));
    for (int64_t x : v) p->add_int64_data(x);
    return p->name();
  }

  struct Attr {
    std::string name;
    std::vector<int64_t> ints;
    bool scalar = false;  // an INT rather than INTS
  };
  std::string Op(const std::string& op, std::initializer_list<std::string> inputs, std::vector<Attr> attrs = {},
                 std::string out = "") {
    onnx::NodeProto* n = g_->add_node();
    n->set_op_type(op);
    n->set_name(op + std::to_string(next_));
    for (const auto& in : inputs) n->add_input(in);
    if (out.empty()) out = std::string("t").append(std::to_string(next_));
    ++next_;
    n->add_output(out);
    for (const Attr& a : attrs) {
      onnx::AttributeProto* p = n->add_attribute();
      p->set_name(a.name);
      if (a.scalar) {
        p->set_type(onnx::AttributeProto::INT);
        p->set_i(a.ints.at(0));
      } else {
        p->set_type(onnx::AttributeProto::INTS);
        for (int64_t v : a.ints) p->add_ints(v);
      }
    }
    return out;
  }
  // Columns [from, to) of a [batch, n] tensor.
  std::string Columns(const std::string& x, int64_t from, int64_t to) {
    return Op("Slice", {x, Ints({from}), Ints({to}), Ints({1})});
  }
  std::string Dense(const std::string& x, const std::string& name) {
    return Op("Add", {Op("MatMul", {x, Param(name + "/w")}), Param(name + "/b")});
  }
  std::string Conv(const std::string& x, const std::string& name, int k, int s, int p) {
    return Op("Conv", {x, Param(name + "/w"), Param(name + "/b")},
              {{"kernel_shape", {k, k}}, {"strides", {s, s}}, {"pads", {p, p, p, p}}});
  }

  void Value(bool input, const std::string& name, int elem_type, const std::vector<int64_t>& dims) {
    onnx::ValueInfoProto* v = input ? g_->add_input() : g_->add_output();
    v->set_name(name);
    auto* t = v->mutable_type()->mutable_tensor_type();
    t->set_elem_type(elem_type);
    auto* shape = t->mutable_shape();
    shape->add_dim()->set_dim_param("batch");
    for (int64_t d : dims) shape->add_dim()->set_dim_value(d);
  }

 private:
  onnx::GraphProto* g_;
  const ParamLayout& layout_;
  std::span<const float> params_;
  int next_ = 0;
};

}  // namespace

base::StatusOr<std::string> ExportOnnx(const ModelSpec& spec, std::span<const float> params) {
  if (std::string e = spec.Check(); !e.empty()) return base::InvalidArgument("cannot export the network: " + e);
  const ParamLayout layout = ModelLayout(spec);
  if (int64_t(params.size()) != layout.total_size()) {
    return base::InvalidArgument("cannot export: " + std::to_string(params.size()) + " parameters for a network of " +
                                 std::to_string(layout.total_size()));
  }
  const Torso torso = TorsoOf(spec);
  ASSIGN_OR_RETURN(const std::vector<LayerIo> io, TorsoShapes(torso, spec.obs_shape));

  onnx::ModelProto model;
  model.set_ir_version(kIrVersion);
  model.set_producer_name("stampede");
  model.set_doc_string("Stampede policy: " + TorsoName(spec) + (spec.lstm_size ? " + LSTM core" : ""));
  auto* opset = model.add_opset_import();
  opset->set_domain("");
  opset->set_version(kOpset);
  onnx::GraphProto* g = model.mutable_graph();
  g->set_name("policy");
  Graph G(g, layout, params);

  // The observation, as the model sees it: float, uint8 scaled by 1/255, images [C, H, W].
  std::vector<int64_t> obs_dims(spec.obs_shape.begin(), spec.obs_shape.end());
  G.Value(true, "observation", spec.uint8_obs ? onnx::TensorProto::UINT8 : onnx::TensorProto::FLOAT, obs_dims);
  std::string x = "observation";
  if (spec.uint8_obs) {
    x = G.Op("Cast", {x}, {{"to", {onnx::TensorProto::FLOAT}, true}});
    x = G.Op("Mul", {x, G.Floats({float(kUint8InputScale)}, {})});
  }
  int rank = 1 + int(spec.obs_shape.size());
  if (torso.images() && spec.obs_shape.size() == 2) {
    x = G.Op("Reshape", {x, G.Ints({-1, 1, spec.obs_shape[0], spec.obs_shape[1]})});
    rank = 4;
  }
  if (spec.center_frames && torso.images()) {
    // net.center_frames: each channel minus its mean over the image.
    x = G.Op("Sub", {x, G.Op("ReduceMean", {x}, {{"axes", {2, 3}}, {"keepdims", {1}, true}})});
  }
  auto flat = [&] {
    if (rank > 2) x = G.Op("Flatten", {x}, {{"axis", {1}, true}});
    rank = 2;
  };
  for (const LayerSpec& l : torso.layers) {
    switch (l.kind) {
      case LayerSpec::Kind::kDense:
        flat();
        x = G.Dense(x, l.name);
        break;
      case LayerSpec::Kind::kConv:
        x = G.Conv(x, l.name, l.kernel, l.stride, l.pad);
        break;
      case LayerSpec::Kind::kMaxPool:
        x = G.Op("MaxPool", {x}, {{"kernel_shape", {l.kernel, l.kernel}}, {"strides", {l.stride, l.stride}},
                                  {"pads", {l.pad, l.pad, l.pad, l.pad}}});
        break;
      case LayerSpec::Kind::kResidual: {
        // IMPALA's block: x + conv1(relu(conv0(relu(x)))).
        std::string r = G.Conv(G.Op("Relu", {x}), l.name + "/conv0", 3, 1, 1);
        r = G.Conv(G.Op("Relu", {r}), l.name + "/conv1", 3, 1, 1);
        x = G.Op("Add", {x, r});
        break;
      }
      case LayerSpec::Kind::kRelu:
        x = G.Op("Relu", {x});
        break;
      case LayerSpec::Kind::kTanh:
        x = G.Op("Tanh", {x});
        break;
    }
  }
  flat();
  if (spec.lstm_size > 0) {
    // The core, one step: gates [i, f, g, o] = x Wx + h Wh + b; c' = f c + i g;
    // h' = o tanh(c'); the state rows are [h, c].
    const int64_t H = spec.lstm_size;
    G.Value(true, "state", onnx::TensorProto::FLOAT, {2 * H});
    const std::string h = G.Columns("state", 0, H), c = G.Columns("state", H, 2 * H);
    const std::string gates =
        G.Op("Add", {G.Op("Add", {G.Op("MatMul", {x, G.Param("core/wx")}), G.Op("MatMul", {h, G.Param("core/wh")})}),
                     G.Param("core/b")});
    const std::string i = G.Op("Sigmoid", {G.Columns(gates, 0, H)});
    const std::string f = G.Op("Sigmoid", {G.Columns(gates, H, 2 * H)});
    const std::string gg = G.Op("Tanh", {G.Columns(gates, 2 * H, 3 * H)});
    const std::string o = G.Op("Sigmoid", {G.Columns(gates, 3 * H, 4 * H)});
    const std::string c2 = G.Op("Add", {G.Op("Mul", {f, c}), G.Op("Mul", {i, gg})});
    x = G.Op("Mul", {o, G.Op("Tanh", {c2})});
    G.Op("Concat", {x, c2}, {{"axis", {1}, true}}, "state_out");
    G.Value(false, "state_out", onnx::TensorProto::FLOAT, {2 * H});
  }
  const int P = spec.policy.output_size();
  if (spec.policy.kind == PolicyKind::kGaussian) {
    // The means, then the state-independent log-stds repeated on every row.
    const std::string mean = G.Dense(x, "policy");
    const std::string log_std = G.Op("Expand", {G.Param("policy/log_std"), G.Op("Shape", {mean})});
    G.Op("Concat", {mean, log_std}, {{"axis", {1}, true}}, "policy_out");
  } else {
    G.Op("Identity", {G.Dense(x, "policy")}, {}, "policy_out");
  }
  G.Op("Identity", {"policy_out"}, {}, "policy");
  G.Value(false, "policy", onnx::TensorProto::FLOAT, {P});
  G.Op("Identity", {G.Dense(x, "baseline")}, {}, "value");
  G.Value(false, "value", onnx::TensorProto::FLOAT, {spec.num_values});
  std::string bytes;
  if (!model.SerializeToString(&bytes)) return base::Internal("the ONNX model did not serialise");
  return bytes;
}

}  // namespace stampede::net
