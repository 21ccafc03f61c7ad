// SPDX-License-Identifier: Apache-2.0
// kvkey.Metrics: the binding of kvkey/metrics.hpp (docs/python.md). The
// connectors record into it; as_dict() reads it, render() is the Prometheus
// text exposition (kvkey.prometheus serves it on a prometheus_client registry).
#include <pybind11/pybind11.h>

#include <kvkey/metrics.hpp>

#include "binding.hpp"
#include "convert.hpp"

#include <cstddef>
#include <cstdint>
#include <string>

namespace py = pybind11;
using namespace kvkey_python;  // NOLINT(google-build-using-namespace): the binding's own helpers

namespace {

std::size_t to_count(const py::handle& obj, const char* field) { return to_uint<std::size_t>(obj, field); }

// A reason name ("identity_mismatch", ...) as the Reason; an InputError naming the known ones otherwise.
kvkey::Reason to_reason(const std::string& name) {
  if (name == "ok") return kvkey::Reason::ok;
  std::string known;
  for (kvkey::Reason r : kvkey::rejection_reasons) {
    if (kvkey::to_string(r) == name) return r;
    known += (known.empty() ? "" : ", ") + std::string(kvkey::to_string(r));
  }
  throw_input_error("reason " + quoted(name) + " is not a rejection reason (known: " + known + ")");
}

void record_rejection(kvkey::Metrics& m, const py::object& verdict, const py::object& field) {
  if (PyUnicode_Check(verdict.ptr())) {  // record_rejection(reason, field)
    if (field.is_none()) throw_input_error("record_rejection(reason, field): field is missing");
    m.record_rejection(to_reason(to_text(verdict, "reason")), to_text(field, "field"));
    return;
  }
  if (!field.is_none()) throw_input_error("record_rejection(verdict): field is given by the verdict");
  if (!py::hasattr(verdict, "reason") || !py::hasattr(verdict, "field")) {
    throw_type_error("verdict", "a Verdict (or a reason name and a field)", verdict);
  }
  m.record_rejection(to_reason(to_text(verdict.attr("reason"), "verdict.reason")),
                     to_text(verdict.attr("field"), "verdict.field"));
}

py::dict by_result(std::initializer_list<std::pair<const char*, std::uint64_t>> cells) {
  py::dict d;
  for (const auto& [name, n] : cells) d[name] = n;
  return d;
}

py::dict as_dict(const kvkey::Metrics& m) {
  const kvkey::MetricsSnapshot s = m.snapshot();
  py::dict d;
  d["lookups"] = s.lookups;
  d["lookup_blocks"] = by_result({{"hit", s.lookup_hit}, {"miss", s.lookup_miss}, {"rejected", s.lookup_rejected}});
  d["loads"] = s.loads;
  d["load_blocks"] = by_result({{"loaded", s.load_loaded}, {"missing", s.load_missing}, {"rejected", s.load_rejected}});
  d["saves"] = s.saves;
  d["save_blocks"] = by_result({{"saved", s.save_saved}, {"failed", s.save_failed}});
  py::dict rejected;
  for (const kvkey::MetricsSnapshot::Rejection& r : s.rejections) {
    const py::str reason(std::string(kvkey::to_string(r.reason)));
    if (!rejected.contains(reason)) rejected[reason] = py::dict();
    rejected[reason].cast<py::dict>()[py::str(std::string(r.field))] = r.count;
  }
  d["rejected_blocks"] = rejected;
  d["rejections"] = s.rejected_total();
  d["false_hits"] = s.false_hits;
  d["payload_verified_bytes"] = s.payload_verified_bytes;
  py::dict errors;
  for (std::size_t k = 0; k < kvkey::store_error_kinds.size(); ++k) {
    errors[py::str(std::string(kvkey::store_error_kinds[k]))] = s.store_errors[k];
  }
  d["store_errors"] = errors;
  return d;
}

}  // namespace

void kvkey_python::bind_metrics(py::module_& m) {
  py::class_<kvkey::Metrics>(m, "Metrics",
                             "Connector counters (lookups, loads, saves, rejections by reason and field, false hits, "
                             "verified bytes, store errors by kind); render() is the Prometheus text exposition.")
      .def(py::init<>())
      .def(
          "record_lookup",
          [](kvkey::Metrics& self, const py::object& hit, const py::object& miss, const py::object& rejected) {
            self.record_lookup(to_count(hit, "hit"), to_count(miss, "miss"), to_count(rejected, "rejected"));
          },
          py::arg("hit"), py::arg("miss"), py::arg("rejected"),
          "One lookup call: blocks counted as reusable, absent, and present but refused.")
      .def(
          "record_load",
          [](kvkey::Metrics& self, const py::object& loaded, const py::object& missing, const py::object& rejected) {
            self.record_load(to_count(loaded, "loaded"), to_count(missing, "missing"), to_count(rejected, "rejected"));
          },
          py::arg("loaded"), py::arg("missing"), py::arg("rejected"),
          "One load call: blocks loaded (verified), absent, and present but refused.")
      .def(
          "record_save",
          [](kvkey::Metrics& self, const py::object& saved, const py::object& failed) {
            self.record_save(to_count(saved, "saved"), to_count(failed, "failed"));
          },
          py::arg("saved"), py::arg("failed"), "One save call: blocks stored and blocks not stored.")
      .def("record_rejection", &record_rejection, py::arg("verdict"), py::arg("field") = py::none(),
           "One rejected block: record_rejection(verdict) (anything with .reason and .field) or "
           "record_rejection(reason, field); a field outside the fixed set counts as 'other', an ok verdict as "
           "nothing.")
      .def(
          "record_false_hits",
          [](kvkey::Metrics& self, const py::object& n) { self.record_false_hits(to_count(n, "n")); }, py::arg("n"),
          "Blocks a lookup counted as reusable that the load then found missing or rejected.")
      .def(
          "record_payload_bytes",
          [](kvkey::Metrics& self, const py::object& n) { self.record_payload_bytes(to_uint<std::uint64_t>(n, "n")); },
          py::arg("n"), "Payload bytes verified and served.")
      .def(
          "record_store_error",
          [](kvkey::Metrics& self, const py::object& kind) { self.record_store_error(to_text(kind, "kind")); },
          py::arg("kind"), "One store error: 'connection', 'timeout', 'protocol', 'server' (anything else: 'other').")
      .def("as_dict", &as_dict, "Every counter, as plain dicts and ints (rejected_blocks: {reason: {field: n}}).")
      .def(
          "render", [](const kvkey::Metrics& self) { return self.render(); },
          "The Prometheus text exposition (kvkey_*_total counters).")
      .def("__repr__", [](const kvkey::Metrics& self) {
        const kvkey::MetricsSnapshot s = self.snapshot();
        return "Metrics(lookups=" + std::to_string(s.lookups) + ", loads=" + std::to_string(s.loads) +
               ", saves=" + std::to_string(s.saves) + ", rejections=" + std::to_string(s.rejected_total()) + ")";
      });
  m.attr("metrics_field_names") = [] {
    py::list out;
    for (std::string_view f : kvkey::metrics_field_names()) out.append(py::str(std::string(f)));
    return py::tuple(out);
  }();
}
