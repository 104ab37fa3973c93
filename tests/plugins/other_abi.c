/* A test plug-in that claims another ABI version (as one built against an older or newer
 * plugin_api.h would): Stampede must refuse it, naming both versions. */
#include "envs/plugin_api.h"

__attribute__((visibility("default"))) const stampede_plugin* stampede_plugin_entry(void) {
  static const stampede_plugin plugin = {STAMPEDE_PLUGIN_ABI_VERSION + 41, 0, 0};
  return &plugin;
}
