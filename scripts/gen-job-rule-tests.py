#!/usr/bin/env python3
"""Write tests/packaging/prometheus-rules-jobs.test.yaml: promtool unit tests of the job rules
of docker/prometheus-rules.yaml (group gpu-otel-sidecar.job: the job-level recording rules and
GPUJobStraggler).

Usage: scripts/gen-job-rule-tests.py [--check]   (--check: exit 1 if the file differs)

Python 3 standard library only; deterministic. Every scenario is written twice, for the two
shapes the collector's Prometheus exporter can give the agent's series:
  default      resource attributes (the pod, its job labels) only on target_info;
  conversion   resource_to_telemetry_conversion enabled: on every series as well.

Scenarios (each sidecar exports every 10 s; GPUs hold 40 GB unless said):
  four workers   PyTorchJob nlp/bert-large, workers 0-2 at 75 % utilization, worker 3 at 25 %
                 from the start: GPUJobStraggler fires for worker 3 (utilization) at 2m, not
                 before; its GPU answers no GPM (no SM activity series), so utilization is its signal
                 (where GPM answers, SM activity is: one alert per GPU). Beside it, the TFJob
                 ml/mnist, two workers both at 30 % (slow next to bert-large, but no job is
                 compared with another: nothing), a one-pod Job vision/resnet50-train with two
                 GPUs at 90 % and 10 % (one pod: never a straggler), and a pod of no job at 5 %.
                 The job-level records of bert-large at 3m: 4 workers, 4 GPUs, mean 62.5 %,
                 spread 50 points, 1600 W, energy 4 x 72 kJ.
  sm activity    JobSet llm/llama (four pods, of child Jobs llama-workers-0 .. -3: one job,
                 the JobSet's), 95 % busy; worker 1's SM activity 10 % against 50 % and 55 %:
                 fires (sm_activity) at 2m. Worker 3 holds no memory (idle, 0 %): never fires.
"""

import os
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
OUT = os.path.join(ROOT, "tests", "packaging", "prometheus-rules-jobs.test.yaml")
GPU = {"hw_model": "NVIDIA H200", "hw_type": "gpu", "hw_vendor": "NVIDIA"}
SCOPE = {"otel_scope_name": "gpu-otel-sidecar"}
STEPS = 20  # samples: 0 .. 3m10s


class Pod:
    def __init__(self, ns, name, node, labels, gpus):
        self.ns, self.name, self.node, self.labels, self.gpus = ns, name, node, labels, gpus
        self.instance = f"{ns}.{name}.trainer"

    def resource(self):
        r = {
            "host_name": self.name,
            "k8s_namespace_name": self.ns,
            "k8s_pod_name": self.name,
            "k8s_container_name": "trainer",
            "k8s_node_name": self.node,
            "service_version": "0.1.0",
            "telemetry_sdk_language": "rust",
            "telemetry_sdk_name": "opentelemetry",
        }
        r.update(self.labels)
        return r


def series(name, labels, values):
    body = ", ".join(f'{k}="{v}"' for k, v in labels.items())
    return f"      - series: '{name}{{{body}}}'\n        values: '{values}'\n"


def pod_series(pod, shape):
    base = {"job": "gpu-otel-sidecar", "instance": pod.instance}
    extra = pod.resource() if shape == "conversion" else {}
    out = series("target_info", {**base, **pod.resource()}, f"1x{STEPS}")
    out += series("gpu_sidecar_export_last_success_seconds", {**base, **SCOPE, **extra}, f"0+10x{STEPS}")
    for gpu in pod.gpus:
        g = {**base, **SCOPE, **extra, "hw_id": gpu["id"], **GPU}
        out += series("hw_gpu_utilization_ratio", {**g, "hw_gpu_task": "general"}, f"{gpu['util']}x{STEPS}")
        if "sm" in gpu:
            out += series("nvidia_gpu_sm_activity_ratio", g, f"{gpu['sm']}x{STEPS}")
        if "tensor" in gpu:
            out += series("nvidia_gpu_tensor_activity_ratio", {**g, "nvidia_gpu_tensor_op": "any"}, f"{gpu['tensor']}x{STEPS}")
        out += series("hw_gpu_memory_usage_bytes", g, f"{gpu.get('mem', 40000000000)}x{STEPS}")
        out += series("hw_gpu_memory_limit_bytes", g, f"141000000000x{STEPS}")
        # 400 W: 4000 J per 10 s.
        out += series("hw_energy_joules_total", g, f"0+4000x{STEPS}")
    return out


def alert_labels(pod, gpu, job, signal, shape):
    labels = {"severity": "warning", "job": "gpu-otel-sidecar", "instance": pod.instance, **SCOPE}
    if shape == "conversion":
        labels.update(pod.resource())
    labels.update({"hw_id": gpu["id"], **GPU})
    if signal == "utilization":
        labels["hw_gpu_task"] = "general"
    labels.update({"k8s_namespace_name": pod.ns, "training_job": job, "k8s_pod_name": pod.name,
                   "k8s_node_name": pod.node, "signal": signal})
    return "{" + ", ".join(f"{k}: {v}" for k, v in labels.items()) + "}"


def kubeflow(job, kind, index):
    return {"k8s_pod_label_training_kubeflow_org_job_name": job,
            "k8s_pod_label_training_kubeflow_org_replica_type": kind,
            "k8s_pod_label_training_kubeflow_org_replica_index": str(index)}


def four_workers():
    bert = [Pod("nlp", f"bert-large-worker-{i}", f"gpu-node-{i}", kubeflow("bert-large", "worker", i),
                [{"id": f"GPU-b{i}", "util": 0.75, "sm": 0.6, "tensor": 0.4} if i < 3
                 else {"id": f"GPU-b{i}", "util": 0.25, "tensor": 0.4}])
            for i in range(4)]
    mnist = [Pod("ml", f"mnist-worker-{i}", "gpu-node-8", kubeflow("mnist", "worker", i),
                 [{"id": f"GPU-m{i}", "util": 0.3}]) for i in range(2)]
    resnet = Pod("vision", "resnet50-train-5zq8m", "gpu-node-9",
                 {"k8s_job_name": "resnet50-train"},
                 [{"id": "GPU-r0", "util": 0.9}, {"id": "GPU-r1", "util": 0.1}])
    loner = Pod("ml", "notebook-0", "gpu-node-9", {}, [{"id": "GPU-n0", "util": 0.05}])
    return bert + mnist + [resnet, loner], bert


def sm_activity():
    pods = [Pod("llm", f"llama-workers-{i}-0-x{i}", f"gpu-node-{i + 4}",
                {"k8s_job_name": f"llama-workers-{i}",
                 "k8s_pod_label_jobset_sigs_k8s_io_jobset_name": "llama",
                 "k8s_pod_label_jobset_sigs_k8s_io_replicatedjob_name": "workers",
                 "k8s_pod_label_jobset_sigs_k8s_io_job_index": str(i)},
                [{"id": f"GPU-l{i}", "util": 0.95, "sm": 0.5 if i == 0 else 0.1}])
            for i in range(2)]
    # Two more workers: one at 55 % SM activity, one that holds no memory (not started yet),
    # idle, never a straggler itself; it counts as a worker (the median of the four is 30 %).
    idle = Pod("llm", "llama-workers-2-0-x2", "gpu-node-6",
               {"k8s_job_name": "llama-workers-2",
                "k8s_pod_label_jobset_sigs_k8s_io_jobset_name": "llama",
                "k8s_pod_label_jobset_sigs_k8s_io_replicatedjob_name": "workers",
                "k8s_pod_label_jobset_sigs_k8s_io_job_index": "2"},
               [{"id": "GPU-l2", "util": 0.95, "sm": 0.55}])
    idle2 = Pod("llm", "llama-workers-3-0-x3", "gpu-node-7",
                {"k8s_job_name": "llama-workers-3",
                 "k8s_pod_label_jobset_sigs_k8s_io_jobset_name": "llama",
                 "k8s_pod_label_jobset_sigs_k8s_io_replicatedjob_name": "workers",
                 "k8s_pod_label_jobset_sigs_k8s_io_job_index": "3"},
                [{"id": "GPU-l3", "util": 0.0, "sm": 0.0, "mem": 0}])
    return pods + [idle, idle2], pods


def test(name, pods, checks, shape):
    out = f"  - name: {name} ({shape})\n    interval: 10s\n    input_series:\n"
    for p in pods:
        out += pod_series(p, shape)
    out += checks
    return out


def main():
    text = (
        "# Generated by scripts/gen-job-rule-tests.py (edit that, then run it); do not edit.\n"
        "# promtool unit tests of the job rules of docker/prometheus-rules.yaml (group\n"
        "# gpu-otel-sidecar.job), each scenario for the exporter's default settings (resource\n"
        "# attributes on target_info only) and for resource_to_telemetry_conversion (on every\n"
        "# series too). Run by scripts/check-rules.sh.\n"
        "rule_files:\n  - ../../docker/prometheus-rules.yaml\n\nevaluation_interval: 10s\n\ntests:\n"
    )
    for shape in ("default", "conversion"):
        pods, bert = four_workers()
        slow = bert[3]
        checks = "    alert_rule_test:\n"
        checks += "      - eval_time: 1m50s\n        alertname: GPUJobStraggler\n        exp_alerts: []\n"
        checks += (
            "      - eval_time: 2m10s\n        alertname: GPUJobStraggler\n        exp_alerts:\n"
            f"          - exp_labels: {alert_labels(slow, slow.gpus[0], 'bert-large', 'utilization', shape)}\n"
            "            exp_annotations:\n"
            "              summary: \"Straggler in job nlp/bert-large: bert-large-worker-3 GPU GPU-b3\"\n"
            "              description: >-\n"
            "                GPU GPU-b3 of worker bert-large-worker-3 (node gpu-node-3) of job nlp/bert-large\n"
            "                has been at 25% utilization for 2 minutes, less than half of the job's other\n"
            "                workers: every synchronous step waits for it. Compare its input pipeline, node\n"
            "                (CPU, network, clocks) and data shard with the others'.\n"
        )
        job = '{k8s_namespace_name="nlp", training_job="bert-large"}'
        checks += "    promql_expr_test:\n"
        for record, value in [
            ("gpu_sidecar:job_workers:count", "4"),
            ("gpu_sidecar:job_gpus:count", "4"),
            ("gpu_sidecar:job_utilization:mean", "0.625"),
            ("gpu_sidecar:job_sm_activity:mean", "0.6"),
            ("gpu_sidecar:job_tensor_activity:mean", "0.4"),
            ("gpu_sidecar:job_utilization:spread", "0.5"),
            ("gpu_sidecar:job_power:watts", "1600"),
            ("gpu_sidecar:job_energy:joules", "288000"),
        ]:
            checks += (
                f"      - expr: '{record}{{training_job=\"bert-large\"}}'\n        eval_time: 3m\n"
                f"        exp_samples:\n          - labels: '{record}{job}'\n            value: {value}\n"
            )
        # Every job, and only jobs, has its worker count; the pod of no job is in none.
        checks += "      - expr: gpu_sidecar:job_workers:count\n        eval_time: 3m\n        exp_samples:\n"
        for labels, value in [('{k8s_namespace_name="ml", training_job="mnist"}', 2),
                              ('{k8s_namespace_name="nlp", training_job="bert-large"}', 4),
                              ('{k8s_namespace_name="vision", training_job="resnet50-train"}', 1)]:
            checks += f"          - labels: 'gpu_sidecar:job_workers:count{labels}'\n            value: {value}\n"
        text += test("four workers, one slow; two unrelated jobs; a one-pod job", pods, checks, shape)
        text += "\n"

        pods, llama = sm_activity()
        slow = llama[1]
        checks = "    alert_rule_test:\n"
        checks += "      - eval_time: 1m50s\n        alertname: GPUJobStraggler\n        exp_alerts: []\n"
        checks += (
            "      - eval_time: 2m10s\n        alertname: GPUJobStraggler\n        exp_alerts:\n"
            f"          - exp_labels: {alert_labels(slow, slow.gpus[0], 'llama', 'sm_activity', shape)}\n"
            "            exp_annotations:\n"
            f"              summary: \"Straggler in job llm/llama: {slow.name} GPU GPU-l1\"\n"
            "              description: >-\n"
            f"                GPU GPU-l1 of worker {slow.name} (node gpu-node-5) of job llm/llama\n"
            "                has been at 10% sm_activity for 2 minutes, less than half of the job's other\n"
            "                workers: every synchronous step waits for it. Compare its input pipeline, node\n"
            "                (CPU, network, clocks) and data shard with the others'.\n"
        )
        checks += "    promql_expr_test:\n"
        checks += (
            "      - expr: gpu_sidecar:job_workers:count\n        eval_time: 3m\n        exp_samples:\n"
            "          - labels: 'gpu_sidecar:job_workers:count{k8s_namespace_name=\"llm\", training_job=\"llama\"}'\n"
            "            value: 4\n"
        )
        text += test("a JobSet worker with low SM activity; a worker holding no memory", pods, checks, shape)
        if shape == "default":
            text += "\n"
    if "--check" in sys.argv[1:]:
        with open(OUT, encoding="utf-8") as f:
            if f.read() != text:
                print(f"{OUT} differs from what scripts/gen-job-rule-tests.py writes; run it", file=sys.stderr)
                sys.exit(1)
        return
    with open(OUT, "w", encoding="utf-8") as f:
        f.write(text)


if __name__ == "__main__":
    main()
