#include <string>
#include <vector>

#include "kiln/error.h"
#include "kiln/ops/factory.h"
#include "kiln/text/tokenizer.h"

namespace kiln::text {

BertInputs bert_inputs(std::span<const Encoding> batch) {
  if (batch.empty()) throw ValueError("bert_inputs: the batch has no encodings");
  const size_t length = batch[0].size();
  std::vector<int64_t> ids, mask, types;
  ids.reserve(batch.size() * length);
  mask.reserve(batch.size() * length);
  types.reserve(batch.size() * length);
  for (size_t i = 0; i < batch.size(); ++i) {
    const Encoding& e = batch[i];
    if (e.size() != length)
      throw ValueError("bert_inputs: encoding 0 has " + std::to_string(length) +
                       " tokens but encoding " + std::to_string(i) + " has " +
                       std::to_string(e.size()) +
                       ": pad the batch (Tokenizer::set_padding) to one length");
    ids.insert(ids.end(), e.ids.begin(), e.ids.end());
    mask.insert(mask.end(), e.attention_mask.begin(), e.attention_mask.end());
    types.insert(types.end(), e.type_ids.begin(), e.type_ids.end());
  }
  const Shape shape = {static_cast<int64_t>(batch.size()), static_cast<int64_t>(length)};
  return {from_vector(ids, shape), from_vector(mask, shape), from_vector(types, shape)};
}

}  // namespace kiln::text
