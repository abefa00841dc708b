// The report hook of every training command (train, finetune, translate-train): curves.png.
#pragma once

#include "train/run_log.h"

namespace roformer {

// out/curves.png, replaced atomically: the training loss (EMA-smoothed), the validation loss, the
// run's headline metric (× its scale, on the loss's axis) and its baseline, against the step.
void render_curves(const train::RunReport& report);

}  // namespace roformer
