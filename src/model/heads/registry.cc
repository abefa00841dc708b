// The head registry: every task head the engine knows, one line each (model/head.h says what a head
// file holds). A new head is its file in this folder, its test, and its line here.
#include "model/head.h"

#define ROFORMER_HEADS(X)   \
  X(sequence_classification) \
  X(token_classification)    \
  X(question_answering)      \
  X(multiple_choice)

namespace model {

#define ROFORMER_DECLARE_HEAD(name) const HeadDef& name##_head();
ROFORMER_HEADS(ROFORMER_DECLARE_HEAD)

const std::vector<const HeadDef*>& head_registry() {
#define ROFORMER_LIST_HEAD(name) &name##_head(),
  static const std::vector<const HeadDef*> heads = {ROFORMER_HEADS(ROFORMER_LIST_HEAD)};
  return heads;
}

}  // namespace model
