#include "mesh/plan/cost_model_json.h"

#include <cstdio>
#include <fstream>

#include "common/error.h"

namespace hdp::mesh {
namespace {

constexpr const char* kFormat = "hdp-cost-model";
constexpr int kVersion = 1;

double number(const nlohmann::json& json, const char* field, const std::string& where) {
  const auto it = json.find(field);
  if (it == json.end() || !it->is_number()) {
    throw InvalidArgument("cost model" + where + ": field '" + field + "' is missing or not a number");
  }
  return it->get<double>();
}

}  // namespace

nlohmann::json cost_model_to_json(const CostModel& model) {
  nlohmann::json json = {{"format", kFormat},
                         {"version", kVersion},
                         {"name", model.name},
                         {"alpha_ms", model.alpha_ms},
                         {"beta_ms", model.beta_ms},
                         {"gamma_ms", model.gamma_ms},
                         {"ring_bytes_per_token", model.ring_bytes_per_token},
                         {"link_gbps", model.link_gbps}};
  if (model.offload) {
    const OffloadModel& o = *model.offload;
    json["offload"] = {{"layers", o.layers},
                       {"act_bytes_per_token", o.act_bytes_per_token},
                       {"act_bytes_fixed", o.act_bytes_fixed},
                       {"d2h_gbps", o.d2h_gbps},
                       {"h2d_gbps", o.h2d_gbps}};
  }
  return json;
}

CostModel cost_model_from_json(const nlohmann::json& json) {
  if (!json.is_object()) throw InvalidArgument("cost model: expected a JSON object");
  if (json.value("format", std::string()) != kFormat) {
    throw InvalidArgument(std::string("cost model: field 'format' must be \"") + kFormat + "\"");
  }
  if (!json.contains("version") || !json["version"].is_number_integer() || json["version"].get<int>() != kVersion) {
    throw InvalidArgument("cost model: field 'version' must be " + std::to_string(kVersion));
  }
  CostModel model;
  const auto name = json.find("name");
  model.name = name != json.end() && name->is_string() ? name->get<std::string>() : "unnamed";
  model.alpha_ms = number(json, "alpha_ms", "");
  model.beta_ms = number(json, "beta_ms", "");
  model.gamma_ms = number(json, "gamma_ms", "");
  model.ring_bytes_per_token = number(json, "ring_bytes_per_token", "");
  model.link_gbps = number(json, "link_gbps", "");
  if (const auto o = json.find("offload"); o != json.end()) {
    if (!o->is_object()) throw InvalidArgument("cost model: field 'offload' must be an object");
    const auto layers = o->find("layers");
    if (layers == o->end() || !layers->is_number_integer()) {
      throw InvalidArgument("cost model.offload: field 'layers' is missing or not an integer");
    }
    model.offload = OffloadModel{.layers = layers->get<int>(),
                                 .act_bytes_per_token = number(*o, "act_bytes_per_token", ".offload"),
                                 .act_bytes_fixed = number(*o, "act_bytes_fixed", ".offload"),
                                 .d2h_gbps = number(*o, "d2h_gbps", ".offload"),
                                 .h2d_gbps = number(*o, "h2d_gbps", ".offload")};
  }
  model.validate();
  return model;
}

CostModel load_cost_model(const std::string& path) {
  std::ifstream in(path);
  if (!in) throw InvalidArgument("cannot read cost model file '" + path + "'");
  nlohmann::json json;
  try {
    json = nlohmann::json::parse(in);
  } catch (const nlohmann::json::exception& e) {
    throw InvalidArgument("cost model file '" + path + "' is not JSON: " + e.what());
  }
  try {
    return cost_model_from_json(json);
  } catch (const InvalidArgument& e) {
    throw InvalidArgument("cost model file '" + path + "': " + e.what());
  }
}

void save_cost_model(const CostModel& model, const std::string& path, const nlohmann::json& calibration) {
  model.validate();
  nlohmann::json json = cost_model_to_json(model);
  if (!calibration.is_null()) json["calibration"] = calibration;
  const std::string temporary = path + ".tmp";
  {
    std::ofstream out(temporary, std::ios::trunc);
    out << json.dump(2) << "\n";
    out.flush();
    if (!out) throw InvalidArgument("cannot write cost model file '" + temporary + "'");
  }
  if (std::rename(temporary.c_str(), path.c_str()) != 0) {
    std::remove(temporary.c_str());
    throw InvalidArgument("cannot rename '" + temporary + "' to cost model file '" + path + "'");
  }
}

}  // namespace hdp::mesh
