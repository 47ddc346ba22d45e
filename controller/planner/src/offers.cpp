// The search's inputs: the GPUs each DC offers (the topology, its "free_gpus", --dcs) and
// the GPU counts to try (--gpus).
#include <fmt/format.h>

#include <charconv>
#include <optional>
#include <set>
#include <stdexcept>
#include <string_view>

#include "wanlab/core/json_fields.hpp"
#include "wanlab/planner/search.hpp"

namespace wanlab::planner {
namespace {

constexpr long kMaxFreeGpus = 10'000'000;

std::string_view trim(std::string_view s) {
  while (!s.empty() && s.front() == ' ') s.remove_prefix(1);
  while (!s.empty() && s.back() == ' ') s.remove_suffix(1);
  return s;
}

std::optional<long> whole_number(std::string_view s) {
  long v = 0;
  const auto [end, ec] = std::from_chars(s.data(), s.data() + s.size(), v);
  if (ec != std::errc{} || end != s.data() + s.size()) return std::nullopt;
  return v;
}

}  // namespace

std::vector<DcOffer> topology_offers(const core::Topology& topo, const nlohmann::json& doc) {
  std::vector<DcOffer> out;
  const auto* dcs = doc.is_object() && doc.contains("dcs") ? &doc.at("dcs") : nullptr;
  for (std::size_t i = 0; i < topo.dcs.size(); ++i) {
    int gpus = topo.dcs[i].nodes * topo.dcs[i].gpus_per_node;
    if (dcs && dcs->is_array() && i < dcs->size() && dcs->at(i).is_object() && dcs->at(i).contains("free_gpus") &&
        dcs->at(i).at("free_gpus").is_number_integer())
      gpus = dcs->at(i).at("free_gpus").get<int>();
    out.push_back({i, gpus});
  }
  return out;
}

std::vector<DcOffer> parse_dc_list(std::string_view list, const core::Topology& topo,
                                   const std::vector<DcOffer>& offers) {
  std::vector<std::string_view> names;
  for (const auto& dc : topo.dcs) names.push_back(dc.name);
  std::vector<DcOffer> out;
  std::size_t pos = 0;
  for (;;) {
    const auto comma = list.find(',', pos);
    const auto entry = trim(list.substr(pos, comma == std::string_view::npos ? std::string_view::npos : comma - pos));
    if (entry.empty())
      throw std::invalid_argument(fmt::format("--dcs \"{}\": an empty entry; give DC names separated by commas, each "
                                              "optionally NAME:GPUS (e.g. use:2048,usw)",
                                              list));
    const auto colon = entry.find(':');
    const auto name = trim(entry.substr(0, colon));
    const auto dc = topo.dc_index(name);
    if (!dc)
      throw std::invalid_argument(fmt::format("--dcs: unknown DC \"{}\"{}; lab {} has {}", name,
                                              core::fields::did_you_mean(name, names), topo.name,
                                              core::fields::join(names)));
    for (const auto& o : out)
      if (o.dc == *dc) throw std::invalid_argument(fmt::format("--dcs: DC \"{}\" named twice", name));
    int gpus = topo.dcs[*dc].nodes * topo.dcs[*dc].gpus_per_node;
    for (const auto& o : offers)
      if (o.dc == *dc) gpus = o.gpus;
    if (colon != std::string_view::npos) {
      const auto count = trim(entry.substr(colon + 1));
      const auto v = whole_number(count);
      if (!v || *v < 0 || *v > kMaxFreeGpus)
        throw std::invalid_argument(fmt::format("--dcs: \"{}\": the free GPUs after ':' must be a whole number from "
                                                "0 to 10,000,000, not \"{}\"",
                                                entry, count));
      gpus = static_cast<int>(*v);
    }
    out.push_back({*dc, gpus});
    if (comma == std::string_view::npos) break;
    pos = comma + 1;
  }
  return out;
}

GpuRange parse_gpu_range(std::string_view text) {
  const auto bad = [&](std::string_view why) {
    return std::invalid_argument(fmt::format("--gpus \"{}\": {}", text, why));
  };
  const auto dash = text.find('-');
  const auto lo = whole_number(trim(text.substr(0, dash)));
  const auto hi = dash == std::string_view::npos ? lo : whole_number(trim(text.substr(dash + 1)));
  if (!lo || !hi) throw bad("give a number of GPUs (2560) or a range (1536-4096)");
  if (*lo < 1 || *hi > 1L << 16) throw bad("give GPU counts from 1 to 65,536");
  if (*lo > *hi) throw bad("the range's low end is above its high end");
  return {*lo, *hi};
}

std::vector<long> gpu_counts(const GpuRange& r) {
  std::set<long> counts{r.lo, r.hi};
  for (int i = 1; i <= 6; ++i) counts.insert(r.lo + (r.hi - r.lo) * i / 7);
  return {counts.begin(), counts.end()};
}

}  // namespace wanlab::planner
