// The one training loop (src/train/run_loop.h) with a fake task and a fake recipe: evaluation and
// checkpoint cadence (every N steps, at epochs' ends, the last step, retention), the run log and
// report hook, the best checkpoint and early stopping, the non-finite stop, the SIGINT stop with
// its checkpoint, a resume that continues as an uninterrupted run (log, best, patience; also from
// before the first evaluation), and the run directory's lock.
#include <gtest/gtest.h>

#include <csignal>
#include <filesystem>
#include <fstream>
#include <map>
#include <string>
#include <vector>

#include "temp_files.h"
#include "train/run_loop.h"
#include "train/train_testing.h"

namespace {

namespace fs = std::filesystem;

// A task whose loss is a function of the step (NaN where asked) and leaves the gradients at zero.
class FakeTask : public train::Task {
 public:
  int64_t nan_at = -1;        // the 0-based step whose loss is NaN
  int64_t interrupt_at = -1;  // raise SIGINT during this 0-based step
  std::string name() const override { return "fake"; }
  train::Batch train_batch(int64_t step) override {
    train::Batch b;
    b.B = 1, b.T = 1, b.ids = {step}, b.targets = {0};  // the model never sees them
    return b;
  }
  const std::vector<train::Batch>& validation_batches() override { return val_; }
  int64_t loss_count(const train::Batch& batch) const override { return batch.B; }
  train::LossStats loss_and_grad(train::Trainable&, const train::Batch& batch, uint64_t, int64_t) override {
    const int64_t step = batch.ids[0];
    if (step == interrupt_at) std::raise(SIGINT);
    return {step == nan_at ? NAN : 1.0 / static_cast<double>(2 + step), 1, {}};
  }
  train::LossStats evaluate(train::Trainable&, const train::Batch&, int64_t) override { return {}; }

 private:
  std::vector<train::Batch> val_;
};

// A recipe whose evaluations give scripted metrics (by evaluation index) and that writes the step
// into each model directory it is asked for.
class FakeRecipe : public train::Recipe {
 public:
  std::vector<double> scores;   // "score" of evaluation i
  std::vector<double> losses;   // the validation loss of evaluation i (default 1 / step)
  int64_t interrupt_at = -1;    // raise SIGINT during the evaluation at this step
  const train::TrainerState* state = nullptr;
  std::vector<int64_t> evaluated;

  void evaluate(train::EvalRecord& rec) override {
    evaluated.push_back(rec.step);
    const size_t i = evaluated.size() - 1;
    rec.val_loss = i < losses.size() ? losses[i] : 1.0 / static_cast<double>(rec.step);
    rec.metrics["score"] = i < scores.size() ? scores[i] : 0.0;
    if (rec.step == interrupt_at) std::raise(SIGINT);
  }
  void write_model(const std::string& dir) override {
    std::ofstream(dir + "/step.txt") << state->step;
  }
};

std::string read(const std::string& path) {
  std::ifstream in(path);
  return std::string(std::istreambuf_iterator<char>(in), {});
}

// A model, a fake task and a Trainer for each run.
struct Rig {
  model::RoFormer<float> m{train_testing::tiny_config(11, 8)};
  FakeTask task;
  FakeRecipe recipe;
  std::unique_ptr<train::Trainer> trainer;
  train::TrainerState state;
  std::vector<int> reports;  // history sizes the hook saw

  Rig() {
    m.init_weights(1);
    train::TrainerConfig tc;
    tc.schedule.total_steps = 100;
    trainer = std::make_unique<train::Trainer>(m, task, tc);
    recipe.state = &state;
  }
  train::LoopResult run(train::LoopOptions o, const std::string& resumed_from = "") {
    o.progress = false;
    train::RunLoop loop(o, *trainer, recipe, state, resumed_from, [this](const train::RunReport& r) {
      reports.push_back(static_cast<int>(r.history->size()));
    });
    return loop.run();
  }
};

std::string fresh_dir(const std::string& name) {
  const std::string dir = test_files::temp_dir() + name;
  fs::remove_all(dir);
  train::claim_run_directory(dir, true, {});
  return dir;
}

TEST(RunLoop, EvaluatesAndCheckpointsOnItsCadenceAndKeepsTheNewest) {
  Rig rig;
  train::LoopOptions o;
  o.out = fresh_dir("cadence");
  o.total_steps = 10, o.eval_every = 3, o.save_every = 4, o.save_at_eval = false, o.keep_checkpoints = 2;
  const train::LoopResult r = rig.run(o);
  EXPECT_EQ(r.exit_code, 0);
  EXPECT_EQ(r.steps_done, 10);
  EXPECT_EQ(rig.recipe.evaluated, (std::vector<int64_t>{3, 6, 9, 10}));  // and the last step
  EXPECT_FALSE(fs::exists(o.out + "/step-000004"));                    // two kept
  EXPECT_EQ(read(o.out + "/step-000008/step.txt"), "8");
  EXPECT_EQ(read(o.out + "/latest"), "step-000010\n");
  EXPECT_EQ(r.checkpoint, o.out + "/step-000010");
  // metrics.csv and the hook after every evaluation and every checkpoint: steps 3, 4, 6, 8, 9, 10.
  EXPECT_EQ(rig.reports, (std::vector<int>{3, 4, 6, 8, 9, 10}));
  std::ifstream log(o.out + "/metrics.jsonl");
  int lines = 0;
  for (std::string line; std::getline(log, line);) ++lines;
  EXPECT_EQ(lines, 10);
  EXPECT_EQ(r.last_eval.step, 10);
}

TEST(RunLoop, EpochsSetTheEvaluationsWhenNoEveryIsGiven) {
  Rig rig;
  train::LoopOptions o;
  o.out = fresh_dir("epochs");
  o.total_steps = 7, o.steps_per_epoch = 3;
  rig.run(o);
  EXPECT_EQ(rig.recipe.evaluated, (std::vector<int64_t>{3, 6, 7}));
  EXPECT_TRUE(fs::exists(o.out + "/step-000006"));  // a checkpoint at each evaluation (save_at_eval)
  EXPECT_NE(read(o.out + "/metrics.jsonl").find("\"epoch\":2.0"), std::string::npos);
}

TEST(RunLoop, KeepsTheBestAndStopsAfterPatienceEvaluationsWithoutImprovement) {
  Rig rig;
  rig.recipe.scores = {0.5, 0.7, 0.6, 0.65, 0.9};
  train::LoopOptions o;
  o.out = fresh_dir("best");
  o.total_steps = 20, o.eval_every = 2, o.metric = o.best_metric = "score", o.higher_is_better = true, o.keep_best = true;
  o.patience = 2;
  const train::LoopResult r = rig.run(o);
  EXPECT_EQ(r.exit_code, 0);
  EXPECT_TRUE(r.stopped_early);
  EXPECT_EQ(r.steps_done, 8);  // evaluations at 2, 4 (best), 6, 8: two without improvement
  EXPECT_EQ(r.best_step, 4);
  EXPECT_DOUBLE_EQ(r.best, 0.7);
  EXPECT_EQ(read(o.out + "/best/step.txt"), "4");
  EXPECT_FALSE(fs::exists(o.out + "/best.new"));
}

// train and translate-train: early stopping on the validation loss while the progress line and the
// report show another metric, with no out/best; the early stop writes a checkpoint (save_every does
// not fall on it) whose bookkeeping tells a --resume that the run is over.
TEST(RunLoop, PatienceFollowsTheBestMetricWithoutABestDirectory) {
  Rig rig;
  rig.recipe.losses = {3.0, 2.0, 2.5, 2.0, 1.0};  // no lower loss after step 4 (2.0 again is no better)
  rig.recipe.scores = {1, 2, 3, 4, 5};            // the shown metric improves throughout
  train::LoopOptions o;
  o.out = fresh_dir("patience_loss");
  o.total_steps = 20, o.eval_every = 2, o.save_every = 5, o.save_at_eval = false, o.metric = "score";
  o.patience = 2;
  const train::LoopResult r = rig.run(o);
  EXPECT_TRUE(r.stopped_early);
  EXPECT_EQ(r.steps_done, 8);
  EXPECT_EQ(r.best_step, 4);
  EXPECT_DOUBLE_EQ(r.best, 2.0);
  EXPECT_FALSE(fs::exists(o.out + "/best"));
  EXPECT_EQ(r.checkpoint, o.out + "/step-000008");
  const train::ResumePoint at = train::resume_point(o.out, "test");
  EXPECT_EQ(at.step, 8);
  EXPECT_EQ(train::evaluations_without_improvement(at.task_json, at.dir), 2);
  EXPECT_TRUE(train::finished_early(at, 2, o.out, "validation loss"));
  EXPECT_FALSE(train::finished_early(at, 3, o.out, "validation loss"));  // a larger patience would go on
  EXPECT_FALSE(train::finished_early(at, 0, o.out, "validation loss"));

  Rig plain;  // patience 0: no bookkeeping, the loss is not followed
  plain.recipe.losses = rig.recipe.losses;
  o.out = fresh_dir("patience_none");
  o.patience = 0;
  const train::LoopResult all = plain.run(o);
  EXPECT_FALSE(all.stopped_early);
  EXPECT_EQ(all.steps_done, 20);
  EXPECT_EQ(train::resume_point(o.out, "test").task_json, "");
}

TEST(RunLoop, ANonFiniteLossStopsWithStatus3AndTheLastGoodCheckpoint) {
  Rig rig;
  rig.task.nan_at = 5;  // the sixth step
  train::LoopOptions o;
  o.out = fresh_dir("nan");
  o.total_steps = 10, o.eval_every = 2;
  const train::LoopResult r = rig.run(o);
  EXPECT_EQ(r.exit_code, 3);
  EXPECT_EQ(r.steps_done, 5);
  EXPECT_EQ(r.checkpoint, o.out + "/step-000004");
  EXPECT_EQ(read(o.out + "/latest"), "step-000004\n");
}

// SIGINT during step 6's evaluation: a checkpoint at step 6, status 130; --resume then ends as the
// uninterrupted run did: the same log (timings aside), evaluations, best checkpoint and early stop.
TEST(RunLoop, AStopSignalCheckpointsAndTheResumedRunEndsAsAnUninterruptedOne) {
  // Best at step 4, then three evaluations without improvement (6, 8, 10): the resumed run must
  // carry the best score and the count across step 6 to stop where the whole run stops.
  const std::vector<double> scores = {0.5, 0.7, 0.6, 0.65, 0.6, 0.9, 0.9};
  train::LoopOptions o;
  o.total_steps = 16, o.eval_every = 2, o.metric = o.best_metric = "score", o.higher_is_better = true, o.keep_best = true;
  o.patience = 3;
  Rig whole;
  whole.recipe.scores = scores;
  o.out = fresh_dir("whole");
  const train::LoopResult a = whole.run(o);

  o.out = fresh_dir("stopped");
  Rig first;
  first.recipe.scores = scores;
  first.recipe.interrupt_at = 6;
  const train::LoopResult stopped = first.run(o);
  EXPECT_EQ(stopped.exit_code, 130);
  EXPECT_EQ(stopped.checkpoint, o.out + "/step-000006");

  Rig second;  // a new process: optimiser state and bookkeeping from the checkpoint (the fake
  second.recipe.scores = {0.65, 0.6, 0.9, 0.9};  // recipe writes no weights); evaluations after step 6
  second.state = train::restore_optimizer(stopped.checkpoint, *second.trainer, {});
  const train::LoopResult b = second.run(o, stopped.checkpoint);
  EXPECT_EQ(b.exit_code, 0);
  EXPECT_EQ(b.stopped_early, a.stopped_early);
  EXPECT_EQ(b.steps_done, a.steps_done);
  EXPECT_EQ(b.best_step, a.best_step);
  EXPECT_EQ(a.steps_done, 10);
  EXPECT_EQ(a.best_step, 4);
  EXPECT_EQ(read(o.out + "/best/step.txt"), read(test_files::temp_dir() + "whole/best/step.txt"));
  auto without_timings = [](const std::string& path) {
    std::string out;
    std::ifstream in(path);
    for (std::string line; std::getline(in, line);) {
      out += line.substr(0, line.find("\"elapsed_s\"")) + line.substr(line.find("\"grad_norm\"")) + "\n";
      const size_t t = out.rfind("\"tokens_per_s\"");
      out.erase(t, out.find_first_of(",}", t) - t);
    }
    return out;
  };
  EXPECT_EQ(without_timings(o.out + "/metrics.jsonl"), without_timings(test_files::temp_dir() + "whole/metrics.jsonl"));
}

// Stopped before its first evaluation, a run has no best yet (saved as null: JSON has no NaN); the
// resumed run reads that back and keeps the best of its own evaluations.
TEST(RunLoop, ARunStoppedBeforeItsFirstEvaluationResumes) {
  train::LoopOptions o;
  o.total_steps = 8, o.eval_every = 4, o.metric = o.best_metric = "score", o.higher_is_better = true, o.keep_best = true;
  o.out = fresh_dir("early-stop-resume");
  Rig first;
  first.task.interrupt_at = 1;
  const train::LoopResult stopped = first.run(o);
  EXPECT_EQ(stopped.exit_code, 130);
  EXPECT_TRUE(first.recipe.evaluated.empty());
  ASSERT_FALSE(stopped.checkpoint.empty());

  Rig second;
  second.recipe.scores = {0.7, 0.6};
  second.state = train::restore_optimizer(stopped.checkpoint, *second.trainer, {});
  const train::LoopResult b = second.run(o, stopped.checkpoint);
  EXPECT_EQ(b.exit_code, 0);
  EXPECT_EQ(b.steps_done, 8);
  EXPECT_EQ(b.best_step, 4);
  EXPECT_DOUBLE_EQ(b.best, 0.7);
}

TEST(RunLoop, ARunDirectoryIsLockedWhileARunHoldsIt) {
  const std::string dir = test_files::temp_dir() + "locked";
  {
    const train::RunDirectoryLock first = train::claim_run_directory(dir, true, {});
    EXPECT_THROW(train::RunDirectoryLock(dir, true), io::Error);      // a --resume beside it
    EXPECT_THROW(train::claim_run_directory(dir, true, {}), io::Error);   // a new run beside it
    EXPECT_NO_THROW(train::RunDirectoryLock(dir, false));             // ranks other than 0 take none
  }
  EXPECT_NO_THROW(train::RunDirectoryLock(dir, true));  // released with its holder
  EXPECT_NO_THROW(train::RunDirectoryLock(test_files::temp_dir() + "absent", true));  // nothing to lock
  EXPECT_FALSE(fs::exists(test_files::temp_dir() + "absent"));
}

}  // namespace
