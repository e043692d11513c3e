#include "common/metrics/registry.h"

#include <prometheus/counter.h>
#include <prometheus/gauge.h>
#include <prometheus/histogram.h>
#include <prometheus/registry.h>
#include <prometheus/text_serializer.h>

#include <mutex>

#include "common/check.h"
#include "common/metrics/process_metrics.h"

namespace fleetps::metrics {

void Counter::Increment(double by) const {
  if (c_ != nullptr && by > 0) c_->Increment(by);
}
double Counter::value() const { return c_ ? c_->Value() : 0; }
void Gauge::Set(double v) const {
  if (g_ != nullptr) g_->Set(v);
}
double Gauge::value() const { return g_ ? g_->Value() : 0; }
void Histogram::Observe(double v) const {
  if (h_ != nullptr) h_->Observe(v);
}

std::vector<double> ExponentialBuckets(double start, double factor, int count) {
  std::vector<double> out;
  for (int i = 0; i < count; ++i, start *= factor) out.push_back(start);
  return out;
}

struct Registry::Impl {
  std::shared_ptr<prometheus::Registry> registry = std::make_shared<prometheus::Registry>();
  std::mutex mu;  // guards the family maps (prometheus' own Add is thread-safe; the lookup here is not)
  std::map<std::string, prometheus::Family<prometheus::Counter>*> counters;
  std::map<std::string, prometheus::Family<prometheus::Gauge>*> gauges;
  std::map<std::string, prometheus::Family<prometheus::Histogram>*> histograms;

  void CheckUnused(const std::string& name, const char* type) {
    const int uses = counters.count(name) + gauges.count(name) + histograms.count(name);
    FLEETPS_CHECK(uses == 0) << "metric " << name << " registered as a " << type << " and as another type";
  }
};

Registry::Registry() : impl_(std::make_unique<Impl>()) {}
Registry::~Registry() = default;

Counter Registry::GetCounter(const std::string& name, const std::string& help, const Labels& labels) {
  std::lock_guard<std::mutex> lock(impl_->mu);
  auto it = impl_->counters.find(name);
  if (it == impl_->counters.end()) {
    impl_->CheckUnused(name, "counter");
    it = impl_->counters.emplace(name, &prometheus::BuildCounter().Name(name).Help(help).Register(*impl_->registry))
             .first;
  }
  return Counter(&it->second->Add(labels));
}

Gauge Registry::GetGauge(const std::string& name, const std::string& help, const Labels& labels) {
  std::lock_guard<std::mutex> lock(impl_->mu);
  auto it = impl_->gauges.find(name);
  if (it == impl_->gauges.end()) {
    impl_->CheckUnused(name, "gauge");
    it = impl_->gauges.emplace(name, &prometheus::BuildGauge().Name(name).Help(help).Register(*impl_->registry)).first;
  }
  return Gauge(&it->second->Add(labels));
}

Histogram Registry::GetHistogram(const std::string& name, const std::string& help, const Labels& labels,
                                 const std::vector<double>& buckets) {
  std::lock_guard<std::mutex> lock(impl_->mu);
  auto it = impl_->histograms.find(name);
  if (it == impl_->histograms.end()) {
    impl_->CheckUnused(name, "histogram");
    it = impl_->histograms.emplace(name, &prometheus::BuildHistogram().Name(name).Help(help).Register(*impl_->registry))
             .first;
  }
  return Histogram(&it->second->Add(labels, prometheus::Histogram::BucketBoundaries(buckets)));
}

std::string Registry::Serialize() const {
  return FormatProcessMetrics(SampleThisProcess()) + prometheus::TextSerializer().Serialize(impl_->registry->Collect());
}

}  // namespace fleetps::metrics
