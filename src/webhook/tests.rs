//! Unit tests of the decision ([`Injector::admit`]) and of the review handling ([`answer`]):
//! pods in, patches applied with `json_patch`, the patched pods checked field by field.

use serde_json::{json, Value};

use super::inject::{GpuVisibility, Injector, Outcome, Reinvocation, Scope, SidecarTemplate};
use super::review::answer;

const SIDECAR: &str = "gpu-otel-sidecar";

fn env() -> Value {
    json!([
        {"name": "K8S_POD_NAME", "valueFrom": {"fieldRef": {"fieldPath": "metadata.name"}}},
        {"name": "K8S_CONTAINER_NAME", "value": "trainer"},
        {"name": "GPU_SIDECAR_DEVICES", "value": "pod-resources"}
    ])
}

/// `t` with its `hostNetwork` placement as the chart renders it: the same sidecar without
/// a container port, its health endpoint on a Unix socket in an `emptyDir`.
fn with_host_network(mut t: Value) -> Value {
    let adapt = |list: &Value| -> Value {
        let mut list = list.clone();
        for c in list.as_array_mut().unwrap() {
            let c = c.as_object_mut().unwrap();
            c.remove("ports");
            c.entry("env").or_insert(json!([])).as_array_mut().unwrap().push(
                json!({"name": "GPU_SIDECAR_HEALTH_ADDR", "value": "unix:/run/gpu-otel-sidecar/health.sock"}),
            );
            c.entry("volumeMounts")
                .or_insert(json!([]))
                .as_array_mut()
                .unwrap()
                .push(
                    json!({"name": "gpu-otel-sidecar-run", "mountPath": "/run/gpu-otel-sidecar"}),
                );
        }
        list
    };
    let mut volumes = t["volumes"].clone();
    volumes
        .as_array_mut()
        .unwrap()
        .push(json!({"name": "gpu-otel-sidecar-run", "emptyDir": {}}));
    t["hostNetwork"] = json!({
        "podSpec": t["podSpec"].clone(),
        "initContainers": adapt(&t["initContainers"]),
        "containers": adapt(&t["containers"]),
        "volumes": volumes,
    });
    t
}

/// A native sidecar with the pod-resources volume, shaped as the chart renders it.
fn native() -> Value {
    with_host_network(json!({
        "gpuVisibility": "pod-resources",
        "podSpec": {},
        "initContainers": [{"name": SIDECAR, "image": "gpu-otel-sidecar:0.1.0", "restartPolicy": "Always",
                            "env": env(),
                            "resources": {"requests": {"cpu": "10m", "memory": "32Mi"}},
                            "volumeMounts": [{"name": "gpu-otel-sidecar-pod-resources", "mountPath": "/var/lib/kubelet/pod-resources", "readOnly": true}]}],
        "containers": [],
        "volumes": [{"name": "gpu-otel-sidecar-pod-resources", "hostPath": {"path": "/var/lib/kubelet/pod-resources", "type": "DirectoryOrCreate"}}]
    }))
}

/// The classic sidecar's environment as the chart renders it for the webhook
/// (`restartPolicy: Never`): the exit rule, then what follows it.
fn classic_env() -> Value {
    let mut e = env();
    let list = e.as_array_mut().unwrap();
    list.push(json!({"name": "GPU_SIDECAR_EXIT_WITH_CONTAINERS", "value": "true"}));
    list.push(json!({"name": "GPU_SIDECAR_LOG_LEVEL", "value": "info"}));
    e
}

fn classic() -> Value {
    with_host_network(json!({
        "gpuVisibility": "uuids",
        "podSpec": {"shareProcessNamespace": true},
        "initContainers": [],
        "containers": [{"name": SIDECAR, "image": "gpu-otel-sidecar:0.1.0", "env": classic_env(),
                        "ports": [{"name": "gpusc-health", "containerPort": 13134}]}],
        "volumes": []
    }))
}

fn dra() -> Value {
    with_host_network(json!({
        "gpuVisibility": "dra",
        "podSpec": {},
        "initContainers": [{"name": SIDECAR, "image": "gpu-otel-sidecar:0.1.0", "restartPolicy": "Always",
                            "env": env(), "resources": {"claims": [{"name": "gpu"}], "limits": {"memory": "64Mi"}}}],
        "containers": [],
        "volumes": []
    }))
}

fn injector(template: Value) -> Injector {
    Injector::new(SidecarTemplate::from_json(template).unwrap())
}

fn container(name: &str, resources: Value) -> Value {
    json!({"name": name, "image": "img", "resources": resources})
}

fn gpu(name: &str) -> Value {
    container(name, json!({"limits": {"nvidia.com/gpu": "1"}}))
}

fn pod(annotations: Option<Value>, containers: Vec<Value>) -> Value {
    let mut p = json!({
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": "p", "namespace": "ml"},
        "spec": {"containers": containers}
    });
    if let Some(a) = annotations {
        p["metadata"]["annotations"] = a;
    }
    p
}

fn opted_in(containers: Vec<Value>) -> Value {
    pod(
        Some(json!({"gpu-otel-sidecar.io/inject": "true"})),
        containers,
    )
}

/// Admits `pod` and, when a patch comes back, applies it: (outcome, patched pod, target).
fn run(inj: &Injector, scope: Scope, pod: &Value) -> (Outcome, Value, Option<String>) {
    let typed = serde_json::from_value(pod.clone()).unwrap();
    let a = inj.admit(scope, &typed, &pod["spec"]);
    let mut patched = pod.clone();
    if let Some(patch) = &a.patch {
        json_patch::patch(&mut patched, patch).unwrap();
    } else {
        assert_ne!(a.outcome, Outcome::Injected);
    }
    (a.outcome, patched, a.target)
}

fn env_value(c: &Value, name: &str) -> Option<String> {
    c["env"]
        .as_array()?
        .iter()
        .find(|e| e["name"] == name)
        .and_then(|e| e["value"].as_str().map(str::to_string))
}

#[test]
fn native_sidecar_is_appended_as_an_init_container_for_the_gpu_container() {
    let inj = injector(native());
    let p = opted_in(vec![gpu("tensorflow")]);
    let (outcome, patched, target) = run(&inj, Scope::Pod, &p);
    assert_eq!(outcome, Outcome::Injected);
    assert_eq!(target.as_deref(), Some("tensorflow"));
    let init = patched["spec"]["initContainers"].as_array().unwrap();
    assert_eq!(init.len(), 1);
    assert_eq!(init[0]["name"], SIDECAR);
    assert_eq!(init[0]["restartPolicy"], "Always");
    assert_eq!(
        env_value(&init[0], "K8S_CONTAINER_NAME").as_deref(),
        Some("tensorflow")
    );
    // The rest of the template as rendered.
    assert_eq!(
        env_value(&init[0], "GPU_SIDECAR_DEVICES").as_deref(),
        Some("pod-resources")
    );
    assert_eq!(init[0]["resources"]["requests"]["memory"], "32Mi");
    assert_eq!(
        patched["spec"]["volumes"][0]["hostPath"]["path"],
        "/var/lib/kubelet/pod-resources"
    );
    assert_eq!(
        patched["metadata"]["annotations"]["gpu-otel-sidecar.io/status"],
        "injected"
    );
    assert_eq!(
        patched["metadata"]["annotations"]["gpu-otel-sidecar.io/inject"],
        "true"
    );
    // The GPU container is untouched, and there is no pod-level change in native mode.
    assert_eq!(patched["spec"]["containers"], p["spec"]["containers"]);
    assert!(patched["spec"].get("shareProcessNamespace").is_none());
}

#[test]
fn existing_init_containers_and_volumes_are_kept_and_the_sidecar_goes_last() {
    let inj = injector(native());
    let mut p = opted_in(vec![gpu("trainer")]);
    p["spec"]["initContainers"] = json!([{"name": "fetch", "image": "busybox"}]);
    p["spec"]["volumes"] = json!([{"name": "data", "emptyDir": {}}]);
    let (outcome, patched, _) = run(&inj, Scope::Pod, &p);
    assert_eq!(outcome, Outcome::Injected);
    let names = |field: &str| -> Vec<String> {
        patched["spec"][field]
            .as_array()
            .unwrap()
            .iter()
            .map(|c| c["name"].as_str().unwrap().to_string())
            .collect()
    };
    assert_eq!(names("initContainers"), ["fetch", SIDECAR]);
    assert_eq!(names("volumes"), ["data", "gpu-otel-sidecar-pod-resources"]);
}

#[test]
fn classic_sidecar_is_a_container_and_shares_the_process_namespace() {
    let inj = injector(classic());
    let mut p = opted_in(vec![container("loader", json!({})), gpu("trainer")]);
    p["spec"]["restartPolicy"] = json!("Never");
    let (outcome, patched, target) = run(&inj, Scope::Pod, &p);
    assert_eq!(
        (outcome, target.as_deref()),
        (Outcome::Injected, Some("trainer"))
    );
    let names: Vec<&str> = patched["spec"]["containers"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| c["name"].as_str().unwrap())
        .collect();
    assert_eq!(names, ["loader", "trainer", SIDECAR]);
    assert_eq!(patched["spec"]["shareProcessNamespace"], true);
    assert!(patched["spec"].get("initContainers").is_none());
    assert!(patched["spec"].get("volumes").is_none());
}

/// Classic mode follows the pod's restartPolicy: `Never` keeps the exit rule as rendered,
/// `OnFailure` adds `GPU_SIDECAR_POD_RESTART_POLICY=OnFailure` right after it, `Always` (and
/// an absent policy, which the API server defaults to `Always`) leaves the rule and the shared
/// process namespace out. The audit annotation and the reason say which.
#[test]
fn classic_sidecar_follows_the_pods_restart_policy() {
    let inj = injector(classic());
    let env_names = |patched: &Value| -> Vec<String> {
        let sidecar = patched["spec"]["containers"]
            .as_array()
            .unwrap()
            .iter()
            .find(|c| c["name"] == SIDECAR)
            .unwrap()
            .clone();
        sidecar["env"]
            .as_array()
            .unwrap()
            .iter()
            .map(|e| e["name"].as_str().unwrap().to_string())
            .collect()
    };
    let base = [
        "K8S_POD_NAME",
        "K8S_CONTAINER_NAME",
        "GPU_SIDECAR_DEVICES",
        "GPU_SIDECAR_EXIT_WITH_CONTAINERS",
        "GPU_SIDECAR_LOG_LEVEL",
    ];
    for (policy, env, share, exit) in [
        (Some("Never"), base.to_vec(), Some(true), "with_trainer"),
        (
            Some("OnFailure"),
            vec![
                "K8S_POD_NAME",
                "K8S_CONTAINER_NAME",
                "GPU_SIDECAR_DEVICES",
                "GPU_SIDECAR_EXIT_WITH_CONTAINERS",
                "GPU_SIDECAR_POD_RESTART_POLICY",
                "GPU_SIDECAR_LOG_LEVEL",
            ],
            Some(true),
            "after_restarts",
        ),
        (
            Some("Always"),
            vec![
                "K8S_POD_NAME",
                "K8S_CONTAINER_NAME",
                "GPU_SIDECAR_DEVICES",
                "GPU_SIDECAR_LOG_LEVEL",
            ],
            None,
            "none",
        ),
        (
            None,
            vec![
                "K8S_POD_NAME",
                "K8S_CONTAINER_NAME",
                "GPU_SIDECAR_DEVICES",
                "GPU_SIDECAR_LOG_LEVEL",
            ],
            None,
            "none",
        ),
    ] {
        let mut p = opted_in(vec![gpu("trainer")]);
        if let Some(policy) = policy {
            p["spec"]["restartPolicy"] = json!(policy);
        }
        let (outcome, patched, _) = run(&inj, Scope::Pod, &p);
        assert_eq!(outcome, Outcome::Injected, "{policy:?}");
        assert_eq!(env_names(&patched), env, "{policy:?}");
        assert_eq!(
            patched["spec"]
                .get("shareProcessNamespace")
                .and_then(Value::as_bool),
            share,
            "{policy:?}"
        );
        if policy == Some("OnFailure") {
            let sidecar = &patched["spec"]["containers"][1];
            assert_eq!(
                env_value(sidecar, "GPU_SIDECAR_POD_RESTART_POLICY").as_deref(),
                Some("OnFailure")
            );
        }
        let typed = serde_json::from_value(p.clone()).unwrap();
        let a = inj.admit(Scope::Pod, &typed, &p["spec"]);
        assert_eq!(a.exit.map(|e| e.as_str()), Some(exit));
        assert!(a.reason.contains("restartPolicy"), "{}", a.reason);
        let r = response(
            &answer(
                &inj,
                Scope::Pod,
                &serde_json::to_vec(&review(p, "CREATE")).unwrap(),
            )
            .body,
        );
        assert_eq!(r["auditAnnotations"]["classic-exit"], exit, "{r}");
    }
    // A restart policy in the rendered environment (`extraEnv`) gives way to the pod's: a
    // `Never` pod's sidecar does not wait out restarts that never come, an `OnFailure` one
    // gets the variable once.
    let mut t = classic();
    t["containers"][0]["env"]
        .as_array_mut()
        .unwrap()
        .push(json!({"name": "GPU_SIDECAR_POD_RESTART_POLICY", "value": "OnFailure"}));
    for t in [t.clone(), with_host_network(t)] {
        let inj = injector(t);
        for (policy, want) in [("Never", None), ("OnFailure", Some("OnFailure"))] {
            let mut p = opted_in(vec![gpu("trainer")]);
            p["spec"]["restartPolicy"] = json!(policy);
            let (_, patched, _) = run(&inj, Scope::Pod, &p);
            let names = env_names(&patched);
            let n = names
                .iter()
                .filter(|n| *n == "GPU_SIDECAR_POD_RESTART_POLICY")
                .count();
            assert_eq!(n, usize::from(want.is_some()), "{policy}: {names:?}");
            let sidecar = &patched["spec"]["containers"][1];
            assert_eq!(
                env_value(sidecar, "GPU_SIDECAR_POD_RESTART_POLICY").as_deref(),
                want,
                "{policy}"
            );
        }
    }
    // Native mode: the kubelet stops a native sidecar itself; nothing depends on the policy.
    let native = injector(native());
    let mut p = opted_in(vec![gpu("trainer")]);
    p["spec"]["restartPolicy"] = json!("Always");
    let typed = serde_json::from_value(p.clone()).unwrap();
    assert_eq!(native.admit(Scope::Pod, &typed, &p["spec"]).exit, None);
}

#[test]
fn who_asks_decides() {
    let inj = injector(native());
    let bare = pod(None, vec![gpu("trainer")]);
    assert_eq!(run(&inj, Scope::Pod, &bare).0, Outcome::NotRequested);
    assert_eq!(run(&inj, Scope::Namespace, &bare).0, Outcome::Injected);
    let out = pod(
        Some(json!({"gpu-otel-sidecar.io/inject": "false"})),
        vec![gpu("trainer")],
    );
    assert_eq!(run(&inj, Scope::Namespace, &out).0, Outcome::OptedOut);
    assert_eq!(run(&inj, Scope::Pod, &out).0, Outcome::OptedOut);
    // Only "true" opts in from the pod side.
    let other = pod(
        Some(json!({"gpu-otel-sidecar.io/inject": "yes"})),
        vec![gpu("trainer")],
    );
    assert_eq!(run(&inj, Scope::Pod, &other).0, Outcome::NotRequested);
    assert_eq!(run(&inj, Scope::Namespace, &other).0, Outcome::Injected);
}

#[test]
fn gpu_resources_are_recognized_as_the_pod_resources_client_does() {
    let inj = injector(native());
    for resources in [
        json!({"limits": {"nvidia.com/gpu": "1"}}),
        json!({"requests": {"nvidia.com/gpu": "1"}}),
        json!({"limits": {"nvidia.com/gpu.shared": "1"}}),
        json!({"limits": {"nvidia.com/mig-1g.18gb": "2"}}),
    ] {
        let p = opted_in(vec![container("trainer", resources.clone())]);
        assert_eq!(
            run(&inj, Scope::Pod, &p).0,
            Outcome::Injected,
            "{resources}"
        );
    }
    // A DRA claim (its GPUs are for a sidecar in dra mode).
    let p = opted_in(vec![container(
        "trainer",
        json!({"claims": [{"name": "gpu"}]}),
    )]);
    assert_eq!(run(&injector(dra()), Scope::Pod, &p).0, Outcome::Injected);
    for resources in [
        json!({"limits": {"amd.com/gpu": "1", "cpu": "2"}}),
        json!({"limits": {"nvidia.com/gpus": "1"}}),
        json!({}),
    ] {
        let p = opted_in(vec![container("trainer", resources.clone())]);
        assert_eq!(run(&inj, Scope::Pod, &p).0, Outcome::NoGpu, "{resources}");
    }
    // A GPU init container does not make the pod a GPU pod for the sidecar.
    let mut p = opted_in(vec![container("main", json!({}))]);
    p["spec"]["initContainers"] = json!([gpu("warmup")]);
    assert_eq!(run(&inj, Scope::Pod, &p).0, Outcome::NoGpu);
}

/// A count of zero is no GPU: the trainer next to a `nvidia.com/gpu: 0` TensorBoard gets
/// the sidecar, and a CPU pod that says 0 gets none.
#[test]
fn a_zero_gpu_count_is_no_gpu() {
    let inj = injector(native());
    let zero = |name: &str| container(name, json!({"limits": {"nvidia.com/gpu": "0"}}));
    let p = opted_in(vec![gpu("trainer"), zero("tensorboard")]);
    let (outcome, patched, target) = run(&inj, Scope::Pod, &p);
    assert_eq!(
        (outcome, target.as_deref()),
        (Outcome::Injected, Some("trainer"))
    );
    assert_eq!(
        env_value(&patched["spec"]["initContainers"][0], "K8S_CONTAINER_NAME").as_deref(),
        Some("trainer")
    );
    assert_eq!(
        run(&inj, Scope::Pod, &opted_in(vec![zero("web")])).0,
        Outcome::NoGpu
    );
    // The annotation cannot name a container whose count is zero.
    let mut named = opted_in(vec![gpu("trainer"), zero("tensorboard")]);
    named["metadata"]["annotations"]["gpu-otel-sidecar.io/container"] = json!("tensorboard");
    assert_eq!(run(&inj, Scope::Pod, &named).0, Outcome::UnknownContainer);
}

#[test]
fn a_gpu_quantity_that_does_not_parse_is_a_reason_not_to_inject() {
    let inj = injector(native());
    let p = opted_in(vec![
        gpu("trainer"),
        container("eval", json!({"limits": {"nvidia.com/gpu": "one"}})),
    ]);
    let typed = serde_json::from_value(p.clone()).unwrap();
    let a = inj.admit(Scope::Pod, &typed, &p["spec"]);
    assert_eq!(a.outcome, Outcome::InvalidQuantity);
    assert!(a.patch.is_none());
    assert_eq!(
        a.reason,
        "container \"eval\" has resources.limits[\"nvidia.com/gpu\"] = \"one\", which is not a Kubernetes quantity: it cannot be told whether it uses a GPU"
    );
}

/// A `hostNetwork` pod gets the placement without a container port (a declared port there is
/// a node-wide host port): its health on a Unix socket in an `emptyDir` of its own.
#[test]
fn host_network_pods_get_the_placement_without_a_port() {
    for template in [native(), classic()] {
        let inj = injector(template);
        let mut p = opted_in(vec![gpu("mpi-worker")]);
        p["spec"]["hostNetwork"] = json!(true);
        let (outcome, patched, _) = run(&inj, Scope::Pod, &p);
        assert_eq!(outcome, Outcome::Injected);
        let sidecar = patched["spec"]["initContainers"][0]
            .as_object()
            .or(patched["spec"]["containers"][1].as_object())
            .unwrap()
            .clone();
        let sidecar = Value::Object(sidecar);
        assert_eq!(sidecar["name"], SIDECAR);
        assert!(sidecar.get("ports").is_none(), "{sidecar}");
        assert_eq!(
            env_value(&sidecar, "GPU_SIDECAR_HEALTH_ADDR").as_deref(),
            Some("unix:/run/gpu-otel-sidecar/health.sock")
        );
        assert_eq!(
            env_value(&sidecar, "K8S_CONTAINER_NAME").as_deref(),
            Some("mpi-worker")
        );
        let volumes = patched["spec"]["volumes"].as_array().unwrap();
        assert!(volumes
            .iter()
            .any(|v| v["name"] == "gpu-otel-sidecar-run" && v["emptyDir"] == json!({})));
        // The same pod on the pod network gets the other placement.
        p["spec"]["hostNetwork"] = json!(false);
        let (_, patched, _) = run(&inj, Scope::Pod, &p);
        let text = patched.to_string();
        assert!(!text.contains("gpu-otel-sidecar-run"), "{text}");
    }
}

#[test]
fn several_gpu_containers_need_the_container_annotation() {
    let inj = injector(native());
    let containers = vec![gpu("actor"), container("cpu", json!({})), gpu("learner")];
    let p = opted_in(containers.clone());
    let typed = serde_json::from_value(p.clone()).unwrap();
    let a = inj.admit(Scope::Pod, &typed, &p["spec"]);
    assert_eq!(a.outcome, Outcome::AmbiguousContainer);
    assert!(a.reason.contains("actor, learner"), "{}", a.reason);
    assert!(
        a.reason.contains("gpu-otel-sidecar.io/container"),
        "{}",
        a.reason
    );

    let named = pod(
        Some(
            json!({"gpu-otel-sidecar.io/inject": "true", "gpu-otel-sidecar.io/container": "learner"}),
        ),
        containers.clone(),
    );
    let (outcome, patched, target) = run(&inj, Scope::Pod, &named);
    assert_eq!(
        (outcome, target.as_deref()),
        (Outcome::Injected, Some("learner"))
    );
    assert_eq!(
        env_value(&patched["spec"]["initContainers"][0], "K8S_CONTAINER_NAME").as_deref(),
        Some("learner")
    );
    for wrong in ["cpu", "critic"] {
        let p = pod(
            Some(
                json!({"gpu-otel-sidecar.io/inject": "true", "gpu-otel-sidecar.io/container": wrong}),
            ),
            containers.clone(),
        );
        assert_eq!(
            run(&inj, Scope::Pod, &p).0,
            Outcome::UnknownContainer,
            "{wrong}"
        );
    }
}

#[test]
fn dra_sidecar_joins_the_gpu_containers_claims_as_the_pod_has_them() {
    let inj = injector(dra());
    assert_eq!(inj.template().gpu_visibility, GpuVisibility::Dra);
    // `request` (a claim's request name, Kubernetes >= 1.32) and any newer field are copied.
    let claims = json!([{"name": "gpus", "request": "h200"}, {"name": "nic", "future": 1}]);
    let mut p = opted_in(vec![container(
        "finetune",
        json!({"claims": claims, "requests": {"cpu": "8"}}),
    )]);
    p["spec"]["resourceClaims"] =
        json!([{"name": "gpus", "resourceClaimTemplateName": "two-h200"}]);
    let (outcome, patched, _) = run(&inj, Scope::Pod, &p);
    assert_eq!(outcome, Outcome::Injected);
    let sidecar = &patched["spec"]["initContainers"][0];
    assert_eq!(sidecar["resources"]["claims"], claims);
    // The rest of the sidecar's resources as rendered; the pod's claims as they were.
    assert_eq!(sidecar["resources"]["limits"]["memory"], "64Mi");
    assert_eq!(
        patched["spec"]["resourceClaims"],
        p["spec"]["resourceClaims"]
    );

    // A device-plugin GPU container has no claim to share.
    let plugin = opted_in(vec![gpu("trainer")]);
    let typed = serde_json::from_value(plugin.clone()).unwrap();
    let a = inj.admit(Scope::Pod, &typed, &plugin["spec"]);
    assert_eq!(a.outcome, Outcome::VisibilityMismatch);
    assert!(a.reason.contains("no resource claim"), "{}", a.reason);

    // The other way round: pod-resources mode sees device-plugin GPUs only.
    let inj = injector(native());
    let claimed = opted_in(vec![container(
        "finetune",
        json!({"claims": [{"name": "gpus"}]}),
    )]);
    let typed = serde_json::from_value(claimed.clone()).unwrap();
    let a = inj.admit(Scope::Pod, &typed, &claimed["spec"]);
    assert_eq!(a.outcome, Outcome::VisibilityMismatch);
    assert!(a.reason.contains("gpuVisibility.mode=dra"), "{}", a.reason);
}

#[test]
fn an_injected_pod_is_left_as_it_is() {
    let inj = injector(native());
    let p = opted_in(vec![gpu("trainer")]);
    let (_, once, _) = run(&inj, Scope::Pod, &p);
    let (outcome, twice, _) = run(&inj, Scope::Pod, &once);
    assert_eq!(outcome, Outcome::AlreadyInjected);
    assert_eq!(once, twice);
    // Also when the sidecar came from the named templates, as an ordinary container.
    let mut manual = opted_in(vec![gpu("trainer"), container(SIDECAR, json!({}))]);
    manual["metadata"]["annotations"] = json!({"gpu-otel-sidecar.io/inject": "true"});
    assert_eq!(run(&inj, Scope::Pod, &manual).0, Outcome::AlreadyInjected);
}

#[test]
fn a_volume_of_the_same_name_is_not_overwritten() {
    let inj = injector(native());
    let mut p = opted_in(vec![gpu("trainer")]);
    p["spec"]["volumes"] = json!([{"name": "gpu-otel-sidecar-pod-resources", "emptyDir": {}}]);
    assert_eq!(run(&inj, Scope::Pod, &p).0, Outcome::VolumeConflict);
}

#[test]
fn sidecar_files_of_the_wrong_shape_are_refused() {
    let mut two = native();
    two["containers"] = two["initContainers"].clone();
    let mut none = native();
    none["initContainers"] = json!([]);
    let mut no_target = native();
    no_target["initContainers"][0]["env"] = json!([]);
    let mut unknown = native();
    unknown["podSpec"] = json!({"hostNetwork": true});
    let mut bad_container = native();
    bad_container["initContainers"][0]["ports"] = json!("13134");
    let mut no_host_network = native();
    no_host_network
        .as_object_mut()
        .unwrap()
        .remove("hostNetwork");
    let mut renamed = native();
    renamed["hostNetwork"]["initContainers"][0]["name"] = json!("other");
    for (t, why) in [
        (two, "found 2"),
        (none, "found 0"),
        (no_target, "no K8S_CONTAINER_NAME"),
        (unknown, "unknown field `hostNetwork`"),
        (bad_container, "not a sidecar file as the chart renders it"),
        (no_host_network, "missing field `hostNetwork`"),
        (renamed, "differs in name or placement"),
    ] {
        let e = SidecarTemplate::from_json(t).unwrap_err();
        assert!(e.contains(why), "{e}");
    }
}

// --- answer: the review around the decision ------------------------------------------------

fn review(object: Value, operation: &str) -> Value {
    json!({
        "apiVersion": "admission.k8s.io/v1",
        "kind": "AdmissionReview",
        "request": {
            "uid": "0d6f2a1c-1111-4222-8333-444455556666",
            "kind": {"group": "", "version": "v1", "kind": "Pod"},
            "resource": {"group": "", "version": "v1", "resource": "pods"},
            "namespace": "ml",
            "operation": operation,
            "userInfo": {"username": "alice"},
            "object": object,
            "oldObject": null,
            "dryRun": false
        }
    })
}

fn response(body: &[u8]) -> Value {
    let v: Value = serde_json::from_slice(body).unwrap();
    assert_eq!(v["apiVersion"], "admission.k8s.io/v1");
    assert_eq!(v["kind"], "AdmissionReview");
    v["response"].clone()
}

#[test]
fn answer_carries_the_uid_and_a_base64_json_patch() {
    let inj = injector(native());
    let p = opted_in(vec![gpu("trainer")]);
    let a = answer(
        &inj,
        Scope::Pod,
        &serde_json::to_vec(&review(p.clone(), "CREATE")).unwrap(),
    );
    assert_eq!((a.status, a.outcome), (200, Outcome::Injected));
    let r = response(&a.body);
    assert_eq!(r["uid"], "0d6f2a1c-1111-4222-8333-444455556666");
    assert_eq!(r["allowed"], true);
    assert_eq!(r["patchType"], "JSONPatch");
    assert_eq!(r["auditAnnotations"]["outcome"], "injected");
    // The patch is the bytes of a JSON array, base64 in the review.
    let patch: json_patch::Patch =
        serde_json::from_slice(&base64_decode(r["patch"].as_str().unwrap())).unwrap();
    let mut patched = p;
    json_patch::patch(&mut patched, &patch).unwrap();
    assert_eq!(patched["spec"]["initContainers"][0]["name"], SIDECAR);
}

#[test]
fn a_skip_is_allowed_unchanged_with_its_reason() {
    let inj = injector(native());
    let cpu = opted_in(vec![container("tokenize", json!({}))]);
    let a = answer(
        &inj,
        Scope::Pod,
        &serde_json::to_vec(&review(cpu, "CREATE")).unwrap(),
    );
    assert_eq!((a.status, a.outcome), (200, Outcome::NoGpu));
    assert_eq!(a.dry_run, Some(false));
    let r = response(&a.body);
    assert_eq!(r["allowed"], true);
    assert!(r.get("patch").is_none());
    assert!(r["status"]["message"]
        .as_str()
        .unwrap()
        .contains("no container requests a GPU"));
    // reinvocationPolicy IfNeeded: a later webhook may still add the GPU, and this call's
    // warning would then be about an outcome that did not happen.
    assert!(r.get("warnings").is_none(), "{r}");
}

/// Warnings only where the call is final (`reinvocationPolicy: Never`), the pod asked for
/// the sidecar, and it is not a pod without GPUs that only its namespace asked for.
#[test]
fn warnings_are_given_only_for_final_skips_of_pods_that_asked() {
    let final_calls = injector(native()).with_reinvocation(Reinvocation::Never);
    let warned = |scope: Scope, pod: Value| {
        let a = answer(
            &final_calls,
            scope,
            &serde_json::to_vec(&review(pod, "CREATE")).unwrap(),
        );
        let r = response(&a.body);
        let w = r["warnings"][0].as_str().map(str::to_string);
        (a.outcome, w)
    };
    let cpu = vec![container("tokenize", json!({}))];
    let (outcome, w) = warned(Scope::Pod, opted_in(cpu.clone()));
    assert_eq!(outcome, Outcome::NoGpu);
    assert!(w
        .unwrap()
        .starts_with("gpu-otel-sidecar: not injected: no container requests a GPU"),);
    // Every CPU pod of a labelled namespace: not a word.
    assert_eq!(
        warned(Scope::Namespace, pod(None, cpu.clone())),
        (Outcome::NoGpu, None)
    );
    // A GPU pod of a labelled namespace that cannot be injected is told.
    let (outcome, w) = warned(Scope::Namespace, pod(None, vec![gpu("a"), gpu("b")]));
    assert_eq!(outcome, Outcome::AmbiguousContainer);
    assert!(w.unwrap().contains("gpu-otel-sidecar.io/container"));
    // Not asked for, opted out, already there: no warning.
    for (scope, p, outcome) in [
        (Scope::Pod, pod(None, vec![gpu("t")]), Outcome::NotRequested),
        (
            Scope::Namespace,
            pod(
                Some(json!({"gpu-otel-sidecar.io/inject": "false"})),
                vec![gpu("t")],
            ),
            Outcome::OptedOut,
        ),
        (
            Scope::Pod,
            opted_in(vec![gpu("t"), container(SIDECAR, json!({}))]),
            Outcome::AlreadyInjected,
        ),
    ] {
        assert_eq!(warned(scope, p), (outcome, None));
    }
}

#[test]
fn dry_runs_are_told_apart() {
    let inj = injector(native());
    let mut r = review(opted_in(vec![gpu("trainer")]), "CREATE");
    r["request"]["dryRun"] = json!(true);
    let a = answer(&inj, Scope::Pod, &serde_json::to_vec(&r).unwrap());
    assert_eq!((a.outcome, a.dry_run), (Outcome::Injected, Some(true)));
    let a = answer(&inj, Scope::Pod, b"{");
    assert_eq!((a.outcome, a.dry_run), (Outcome::Invalid, None));
}

#[test]
fn other_operations_and_kinds_are_admitted_unchanged() {
    let inj = injector(native());
    let p = opted_in(vec![gpu("trainer")]);
    let a = answer(
        &inj,
        Scope::Pod,
        &serde_json::to_vec(&review(p.clone(), "UPDATE")).unwrap(),
    );
    assert_eq!((a.status, a.outcome), (200, Outcome::Ignored));
    assert!(response(&a.body).get("patch").is_none());
    let mut svc = review(
        json!({"apiVersion": "v1", "kind": "Service", "metadata": {"name": "s"}}),
        "CREATE",
    );
    svc["request"]["kind"]["kind"] = json!("Service");
    let a = answer(&inj, Scope::Pod, &serde_json::to_vec(&svc).unwrap());
    assert_eq!((a.status, a.outcome), (200, Outcome::Ignored));
}

#[test]
fn malformed_bodies_get_400_with_a_clear_message() {
    let inj = injector(native());
    let p = opted_in(vec![gpu("trainer")]);
    let mut no_request = review(p.clone(), "CREATE");
    no_request.as_object_mut().unwrap().remove("request");
    let mut wrong_kind = review(p.clone(), "CREATE");
    wrong_kind["kind"] = json!("Pod");
    let mut bad_pod = review(p.clone(), "CREATE");
    bad_pod["request"]["object"]["spec"]["containers"] = json!("trainer");
    let mut no_object = review(p.clone(), "CREATE");
    no_object["request"]["object"] = Value::Null;
    let cases: Vec<(Vec<u8>, &str)> = vec![
        (Vec::new(), "empty body"),
        (b"{\"apiVersion\": ".to_vec(), "not an AdmissionReview"),
        (b"<xml/>".to_vec(), "not an AdmissionReview"),
        (serde_json::to_vec(&p).unwrap(), "got kind \"Pod\""),
        (serde_json::to_vec(&no_request).unwrap(), "no request"),
        (
            serde_json::to_vec(&wrong_kind).unwrap(),
            "expected kind AdmissionReview",
        ),
        (serde_json::to_vec(&bad_pod).unwrap(), "not a v1 Pod"),
        (serde_json::to_vec(&no_object).unwrap(), "carries no object"),
    ];
    for (body, expected) in cases {
        let a = answer(&inj, Scope::Pod, &body);
        let text = String::from_utf8(a.body).unwrap();
        assert_eq!((a.status, a.outcome), (400, Outcome::Invalid), "{text}");
        assert!(text.contains(expected), "{expected:?} not in {text:?}");
        assert!(a.content_type.starts_with("text/plain"));
    }
}

fn base64_decode(s: &str) -> Vec<u8> {
    use base64::Engine as _;
    // The review's `patch` is standard base64 (Go's []byte in JSON).
    base64::engine::general_purpose::STANDARD.decode(s).unwrap()
}
