#include "ftcc/optim/checkpoint.hpp"

namespace ftcc::optim {

namespace {
constexpr const char* kPrefix = "optimizer.";

NamedTensors prefixed(const NamedTensors& list) {
  NamedTensors out;
  for (const auto& [name, t] : list) out.emplace_back(kPrefix + name, t);
  return out;
}
}  // namespace

void save_checkpoint(const std::string& path, const nn::Module& model, const Optimizer* optimizer,
                     const nn::Metadata& extra) {
  NamedTensors all = model.named_parameters();
  nn::Metadata meta = extra;
  meta["format"] = "ftcc-checkpoint-1";
  if (optimizer != nullptr) {
    for (auto& e : prefixed(optimizer->state_dict())) all.push_back(e);
    meta["optimizer"] = optimizer->type_name();
  }
  nn::save_safetensors(path, all, meta);
}

nn::Metadata load_checkpoint(const std::string& path, nn::Module& model, Optimizer* optimizer) {
  nn::SafetensorsContents file = nn::load_safetensors(path);
  NamedTensors params = model.named_parameters();
  // Model tensors: everything not under the optimizer prefix must be a parameter and vice versa.
  nn::SafetensorsContents model_part, optim_part;
  for (const auto& e : file.tensors) (e.first.rfind(kPrefix, 0) == 0 ? optim_part : model_part).tensors.push_back(e);
  NamedTensors optim_targets;
  if (optimizer != nullptr) {
    auto it = file.metadata.find("optimizer");
    if (it == file.metadata.end())
      throw nn::FormatError("checkpoint '" + path + "': no optimizer state in the file (metadata has no 'optimizer')");
    if (it->second != optimizer->type_name())
      throw nn::FormatError("checkpoint '" + path + "': optimizer state is for " + it->second + ", not " +
                            optimizer->type_name());
    optim_targets = prefixed(optimizer->state_dict());
  }
  // Validate both parts fully before copying either (load_into validates before it copies).
  nn::load_into(model_part, params, path, true);
  if (optimizer != nullptr) nn::load_into(optim_part, optim_targets, path, true);
  return file.metadata;
}

}  // namespace ftcc::optim
