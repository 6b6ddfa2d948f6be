// The kind table (the rows of the kinds named in kinds.def) and the dispatch
// of a plan unit to its kind's code.
#include "model/kinds/kinds.h"

#include <cstring>

#include "core/error.h"
#include "core/text.h"

namespace strata {

const std::vector<const KindInfo*>& kind_table() {
  static const std::vector<const KindInfo*> table = [] {
    const std::vector<const KindInfo*> t = {
#define STRATA_KIND(Enum, name) &kinds::name##_kind(),
#include "model/kinds/kinds.def"
#undef STRATA_KIND
    };
    const char* names[] = {
#define STRATA_KIND(Enum, name) #name,
#include "model/kinds/kinds.def"
#undef STRATA_KIND
    };
    for (size_t i = 0; i < t.size(); ++i) {
      const KindInfo& k = *t[i];
      STRATA_CHECK(size_t(k.kind) == i && std::strcmp(k.name, names[i]) == 0 && k.f32.forward &&
                       k.f32.backward && k.f64.forward && k.f64.backward && k.summary && k.example,
                   "kind table: the row of '", names[i],
                   "' is incomplete or out of the kinds.def order");
    }
    return t;
  }();
  return table;
}

const KindInfo& kind_info(LayerKind k) {
  const auto& t = kind_table();
  STRATA_CHECK(size_t(k) < t.size(), "layer plan: kind without a table entry");
  return *t[size_t(k)];
}

const char* layer_kind_name(LayerKind k) { return kind_info(k).name; }

std::string kinds_help() {
  std::string out;
  for (const KindInfo* k : kind_table()) {
    out += cat("      ", k->name, ": ", k->summary, "\n");
    for (const KindOption& o : k->options)
      out += o.whole ? cat("          option ", o.key, " (whole number in [", int64_t(o.lo), ", ",
                           int64_t(o.hi), "]): ", o.help, "\n")
                     : cat("          option ", o.key, " (number in [", o.lo, ", ", o.hi,
                           "]): ", o.help, "\n");
  }
  return out;
}

template <typename T>
void unit_forward(UnitForward<T>& f, const PlanUnit& u) {
  kind_info(u.kind).code<T>().forward(f, u);
}

template <typename T>
void unit_backward(UnitBackward<T>& b, const PlanUnit& u) {
  kind_info(u.kind).code<T>().backward(b, u);
}

template void unit_forward<float>(UnitForward<float>&, const PlanUnit&);
template void unit_forward<double>(UnitForward<double>&, const PlanUnit&);
template void unit_backward<float>(UnitBackward<float>&, const PlanUnit&);
template void unit_backward<double>(UnitBackward<double>&, const PlanUnit&);

}  // namespace strata
