// A population's report (config `pbt`): RUN_DIR/pbt.md (each member's final objective,
// frames, exploits, restarts and hyperparameters; the lineage's exploits in order) from
// pbt.jsonl and pbt_summary.json, and RUN_DIR/pbt.png (each member's objective and every
// evolved hyperparameter over its frames, drawn by tools/plot_pbt.py with the venv's
// matplotlib). `stampede report RUN_DIR` of a population, and the end of its run.
#pragma once

#include <string>

namespace stampede::tools {

// Prints and writes pbt.md and pbt.png. 0; 1 when only the plot failed (the reason
// printed); 2 when RUN_DIR holds no population.
int RunPbtReport(const std::string& run_dir);

}  // namespace stampede::tools
