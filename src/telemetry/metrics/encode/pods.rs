//! Node mode's per-pod series ([`POD_CATALOGUE`]) in an export: each pod's points in a
//! `ResourceMetrics` of its own (the node's resource attributes, `k8s.pod.uid`, its name and
//! namespace where known, `service.instance.id` = the node's + `.<uid>`), the not-attributed
//! share's on the node's resource, marked `nvidia.gpu.attribution=not_attributed`.
//!
//! A series is keyed by its metric, its point attributes and its pod's UID (two pods' points
//! on one device have the same point attributes). A pod's energy counts from its share's
//! [`PodShare::energy_since`](crate::sampling::PodShare::energy_since) (the start of the
//! first window it was given a share of), not from its first export: its first window's
//! energy is in its first point.

use std::collections::BTreeMap;
use std::sync::Arc;

use opentelemetry::KeyValue;
use opentelemetry_proto::tonic::common::v1::{any_value, AnyValue, KeyValue as ProtoKeyValue};
use opentelemetry_proto::tonic::metrics::v1::{
    Metric, NumberDataPoint, ResourceMetrics, ScopeMetrics,
};
use opentelemetry_proto::tonic::resource::v1::Resource as ProtoResource;

use super::proto::{number, point};
use super::{instrument_data, is_delta, Building, Encoder, Kind};
use crate::attribution::SERVICE_INSTANCE_ID;
use crate::catalogue::metrics::{
    device_attributes, Instrument, ATTRIBUTION, NOT_ATTRIBUTED, POD_CATALOGUE,
};
use crate::catalogue::resource;
use crate::sampling::{PodRef, Snapshot};
use crate::telemetry::metrics::series::{series_key, Accepted, Origin, Stamp};

impl Encoder {
    /// The per-pod series of `snap`: the not-attributed share's into `out` (the node's
    /// resource), each pod's into its own `ResourceMetrics` (returned, by UID). Nothing
    /// when no device carries shares (sidecar mode).
    pub(super) fn pod_metrics(
        &mut self,
        snap: &Snapshot,
        out: &mut Building,
        accepted: &mut Vec<Accepted>,
    ) -> Vec<ResourceMetrics> {
        if snap.devices.iter().all(|d| d.pods.is_none()) {
            return Vec::new();
        }
        let at = Stamp {
            wall: snap.taken_at,
            mono: snap.taken_instant,
        };
        let delta = is_delta(self.temporality, Kind::ObservableCounter);
        let mut pods: BTreeMap<String, (Arc<PodRef>, Vec<Metric>)> = BTreeMap::new();
        for def in POD_CATALOGUE {
            let mut node_points = Vec::new();
            let mut pod_points: BTreeMap<String, Vec<NumberDataPoint>> = BTreeMap::new();
            for d in &snap.devices {
                let Some(shares) = &d.pods else {
                    continue;
                };
                let common = device_attributes(d);
                for s in shares {
                    let Some(raw) = (def.extract)(s) else {
                        continue;
                    };
                    let mut attrs = common.clone();
                    if s.pod.is_none() {
                        attrs.push(KeyValue::new(ATTRIBUTION, NOT_ATTRIBUTED));
                    }
                    let mut key_attrs = attrs.clone();
                    if let Some(p) = &s.pod {
                        key_attrs.push(KeyValue::new(resource::K8S_POD_UID, p.uid.clone()));
                    }
                    let value = number(def.number, raw);
                    let dp = match def.instrument {
                        Instrument::Gauge => point(&attrs, None, at.wall, value),
                        Instrument::Counter => {
                            let origin = Origin::AgentStart(s.energy_since.unwrap_or(at.wall));
                            let c = self.counter_point(
                                def.name, &key_attrs, raw, at, origin, delta, accepted,
                            );
                            point(&attrs, Some(c.start), c.time, number(def.number, c.value))
                        }
                        Instrument::UpDownCounter => {
                            let c = self
                                .series
                                .up_down(&series_key(def.name, &key_attrs), raw, at);
                            point(&attrs, Some(c.start), c.time, value)
                        }
                    };
                    match &s.pod {
                        None => node_points.push(dp),
                        Some(p) => {
                            pods.entry(p.uid.clone())
                                .or_insert_with(|| (p.clone(), Vec::new()));
                            pod_points.entry(p.uid.clone()).or_default().push(dp);
                        }
                    }
                }
            }
            let n = node_points.len();
            out.push(
                def.name,
                def.unit,
                def.description,
                instrument_data(def.instrument, node_points, delta),
                n,
            );
            for (uid, points) in pod_points {
                let mut building = Building {
                    metrics: Vec::new(),
                    points: 0,
                };
                let n = points.len();
                building.push(
                    def.name,
                    def.unit,
                    def.description,
                    instrument_data(def.instrument, points, delta),
                    n,
                );
                out.points += building.points;
                if let Some((_, metrics)) = pods.get_mut(&uid) {
                    metrics.append(&mut building.metrics);
                }
            }
        }
        pods.into_values()
            .filter(|(_, metrics)| !metrics.is_empty())
            .map(|(pod, metrics)| ResourceMetrics {
                resource: Some(pod_resource(&self.resource, &pod)),
                scope_metrics: vec![ScopeMetrics {
                    scope: Some(self.scope.clone()),
                    metrics,
                    ..Default::default()
                }],
                ..Default::default()
            })
            .collect()
    }
}

/// A pod's resource: the node's attributes, `service.instance.id` followed by `.<uid>`, and
/// the pod's `k8s.pod.uid` (with `k8s.pod.name`, `k8s.namespace.name` where known), sorted
/// by key as the node's are.
fn pod_resource(node: &ProtoResource, pod: &PodRef) -> ProtoResource {
    let text = |s: String| {
        Some(AnyValue {
            value: Some(any_value::Value::StringValue(s)),
        })
    };
    let mut attributes: Vec<ProtoKeyValue> = node
        .attributes
        .iter()
        .map(|kv| {
            if kv.key != SERVICE_INSTANCE_ID {
                return kv.clone();
            }
            let node_id = match kv.value.as_ref().and_then(|v| v.value.as_ref()) {
                Some(any_value::Value::StringValue(s)) => s.clone(),
                _ => String::new(),
            };
            ProtoKeyValue {
                key: kv.key.clone(),
                value: text(format!("{node_id}.{}", pod.uid)),
                ..Default::default()
            }
        })
        .collect();
    let mut own = vec![(resource::K8S_POD_UID, pod.uid.clone())];
    if let (Some(name), Some(ns)) = (&pod.name, &pod.namespace) {
        own.push((resource::K8S_POD_NAME, name.clone()));
        own.push((resource::K8S_NAMESPACE_NAME, ns.clone()));
    }
    for (key, value) in own {
        attributes.retain(|kv| kv.key != key);
        // The node's attributes are sorted by key: keep them so.
        let at = attributes.partition_point(|kv| kv.key.as_str() < key);
        attributes.insert(
            at,
            ProtoKeyValue {
                key: key.to_string(),
                value: text(value),
                ..Default::default()
            },
        );
    }
    ProtoResource {
        attributes,
        ..Default::default()
    }
}

#[cfg(test)]
mod tests {
    use std::time::{Duration, Instant, UNIX_EPOCH};

    use opentelemetry::KeyValue;
    use opentelemetry_proto::tonic::metrics::v1::metric::Data;
    use opentelemetry_proto::tonic::metrics::v1::number_data_point;

    use super::super::Encoder;
    use crate::config::TemporalityPreference;
    use crate::sampling::{DeviceInfo, DeviceSample, DeviceState, PodRef, PodShare, Snapshot};
    use crate::telemetry::metrics::recorded::Recorded;
    use crate::telemetry::metrics::self_metrics::OwnValues;
    use crate::telemetry::metrics::series::Stamp;

    fn text(attrs: &[super::ProtoKeyValue], key: &str) -> Option<String> {
        attrs.iter().find(|kv| kv.key == key).map(|kv| {
            match kv.value.as_ref().and_then(|v| v.value.as_ref()) {
                Some(super::any_value::Value::StringValue(s)) => s.clone(),
                other => format!("{other:?}"),
            }
        })
    }

    /// A pod's share on a resource of its own (the node's, with its UID and the suffixed
    /// instance id), the rest on the node's marked not attributed; the pod's energy counts
    /// from its share's start.
    #[test]
    fn each_pod_on_its_own_resource_and_energy_from_its_start() {
        let resource = opentelemetry_sdk::Resource::builder_empty()
            .with_attributes([
                KeyValue::new("service.instance.id", "gpu-node-7"),
                KeyValue::new("k8s.node.name", "gpu-node-7"),
            ])
            .build();
        let t0 = UNIX_EPOCH + Duration::from_secs(1_800_000_000);
        let mut enc = Encoder::new(
            &resource,
            TemporalityPreference::Cumulative,
            Duration::from_secs(3600),
            t0,
        );
        let info = std::sync::Arc::new(DeviceInfo {
            uuid: "GPU-a".into(),
            ..DeviceInfo::default()
        });
        let mut d = DeviceSample::empty(info, DeviceState::Ok);
        let pod = std::sync::Arc::new(PodRef {
            uid: "0f3c1d2e-aaaa-4bbb-8ccc-123456789abc".into(),
            name: Some("infer-0".into()),
            namespace: Some("ml".into()),
        });
        let mut mine = PodShare::new(Some(pod));
        mine.memory_used_bytes = Some(1 << 30);
        mine.energy_millijoules = Some(5_000);
        mine.energy_since = Some(t0 - Duration::from_secs(10));
        let mut rest = PodShare::new(None);
        rest.memory_used_bytes = Some(2 << 30);
        d.pods = Some(vec![mine, rest]);
        let snap = Snapshot {
            taken_at: t0,
            taken_instant: Instant::now(),
            seq: 1,
            export: true,
            devices: vec![d],
        };
        let batch = enc.encode(
            Some(&snap),
            &Recorded::new(),
            &OwnValues::default(),
            Stamp::now(),
        );
        let rms = &batch.request.resource_metrics;
        assert_eq!(rms.len(), 2, "the node's and the pod's");
        let pod_attrs = &rms[1].resource.as_ref().unwrap().attributes;
        assert_eq!(
            text(pod_attrs, "service.instance.id").as_deref(),
            Some("gpu-node-7.0f3c1d2e-aaaa-4bbb-8ccc-123456789abc")
        );
        assert_eq!(text(pod_attrs, "k8s.pod.name").as_deref(), Some("infer-0"));
        assert_eq!(
            text(pod_attrs, "k8s.node.name").as_deref(),
            Some("gpu-node-7")
        );
        let node_attrs = &rms[0].resource.as_ref().unwrap().attributes;
        assert_eq!(text(node_attrs, "k8s.pod.uid"), None);
        let metric = |rm: usize, name: &str| {
            rms[rm].scope_metrics[0]
                .metrics
                .iter()
                .find(|m| m.name == name)
                .cloned()
                .unwrap_or_else(|| panic!("{name} in resource {rm}"))
        };
        let Some(Data::Sum(energy)) = metric(1, "nvidia.gpu.pod.energy").data else {
            panic!("a sum")
        };
        let p = &energy.data_points[0];
        let since = (t0 - Duration::from_secs(10))
            .duration_since(UNIX_EPOCH)
            .unwrap()
            .as_nanos() as u64;
        assert_eq!(p.start_time_unix_nano, since);
        assert_eq!(p.value, Some(number_data_point::Value::AsDouble(5.0)));
        let Some(Data::Sum(memory)) = metric(0, "nvidia.gpu.pod.memory.usage").data else {
            panic!("a sum")
        };
        let p = &memory.data_points[0];
        assert_eq!(
            text(&p.attributes, "nvidia.gpu.attribution").as_deref(),
            Some("not_attributed")
        );
        assert_eq!(p.value, Some(number_data_point::Value::AsInt(2 << 30)));
        assert!(
            metric(1, "nvidia.gpu.pod.memory.usage").data.is_some(),
            "the pod's memory on its resource"
        );
        // Every resource's points are counted.
        let points: usize = rms
            .iter()
            .flat_map(|rm| &rm.scope_metrics)
            .flat_map(|sm| &sm.metrics)
            .map(|m| match &m.data {
                Some(Data::Gauge(g)) => g.data_points.len(),
                Some(Data::Sum(s)) => s.data_points.len(),
                Some(Data::Histogram(h)) => h.data_points.len(),
                _ => 0,
            })
            .sum();
        assert_eq!(batch.points, points);
        assert!(points >= 3, "{points}");
    }
}
