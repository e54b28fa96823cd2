#!/usr/bin/env bash
# Schema check of the shipped Kubernetes manifests (examples/kubernetes/*.yaml), offline: PyPI
# `kubernetes-validate` (it ships the Kubernetes OpenAPI schemas per version) in a venv under
# target/, each YAML document validated against Kubernetes $K8S_VERSION in strict mode (unknown
# fields are errors). Also checks what the replicas need of the manifest: the advertise URL from
# the pod IP, probes on /readyz and /healthz, the secret mounted 0400, a non-root pod, a grace
# period covering preStop + shutdown_grace.
#
# Usage:  bash .ci/k8s-validate.sh [FILE...]      (default: examples/kubernetes/*.yaml)
# Env:    K8S_VALIDATE_VERSION (default 1.37.0), K8S_VERSION (default 1.34.0),
#         K8S_VALIDATE_VENV (default target/k8s-validate-venv), INTEROP_PYTHON (default python3)
# Output: one PASS/FAIL line per document and per check, then `N passed, M failed`.
# Expected count (`expected: N checks`): 12 for the default files (5 documents, "a Deployment is
# present", 6 checks of the Deployment); with FILE arguments at least 7 (one Deployment and its
# checks). Fewer checks than that, e.g. no Deployment, is a failure.
set -uo pipefail
# shellcheck source-path=SCRIPTDIR source=lib.sh
. "$(dirname "${BASH_SOURCE[0]}")/lib.sh" k8s-validate || exit 2
REPO="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$REPO" || exit 2

VALIDATOR_VERSION="${K8S_VALIDATE_VERSION:-1.37.0}"
K8S_VERSION="${K8S_VERSION:-1.34.0}"
VENV="${K8S_VALIDATE_VENV:-$REPO/target/k8s-validate-venv}"
BOOT="${INTEROP_PYTHON:-python3}"
# Raise 12 when a document or a Deployment check is added.
if [ "$#" -gt 0 ]; then FILES=("$@"); ci_expect 7; else FILES=(examples/kubernetes/*.yaml); ci_expect 12; fi
[ -f "${FILES[0]}" ] || die "no manifest: ${FILES[*]}"

KV="$VENV/bin/python"
if ! "$KV" -c "import importlib.metadata as m, sys; sys.exit(m.version('kubernetes-validate') != '$VALIDATOR_VERSION')" 2>/dev/null; then
  command -v "$BOOT" >/dev/null || die "$BOOT is required"
  log "creating $VENV with kubernetes-validate==$VALIDATOR_VERSION"
  rm -rf "$VENV"
  "$BOOT" -m venv "$VENV" || die "python -m venv failed (Debian: apt-get install python3-venv)"
  "$KV" -m pip install --quiet --disable-pip-version-check "kubernetes-validate==$VALIDATOR_VERSION" ||
    die "pip install kubernetes-validate==$VALIDATOR_VERSION failed"
fi

out=$("$KV" - "$K8S_VERSION" "${FILES[@]}" <<'PY'
import sys

import kubernetes_validate
import yaml

version, files = sys.argv[1], sys.argv[2:]
passed = failed = 0


def report(ok, name, detail=""):
    global passed, failed
    print(f"{'PASS' if ok else 'FAIL'} k8s {name}{': ' + detail if detail else ''}", flush=True)
    if ok:
        passed += 1
    else:
        failed += 1


deployments = []
for path in files:
    with open(path) as f:
        docs = [d for d in yaml.safe_load_all(f) if d is not None]
    for i, doc in enumerate(docs):
        name = f"{path}#{i + 1} {doc.get('kind')}/{(doc.get('metadata') or {}).get('name')}"
        try:
            kubernetes_validate.validate(doc, version, strict=True)
            report(True, name, f"valid against Kubernetes {version} (strict)")
        except kubernetes_validate.utils.ValidationError as e:
            report(False, name, f"{'.'.join(str(p) for p in e.path)}: {e.message}")
        except Exception as e:  # noqa: BLE001 - e.g. an unknown kind or version
            report(False, name, f"{type(e).__name__}: {e}")
        if doc.get("kind") == "Deployment":
            deployments.append((name, doc))

report(len(deployments) > 0, "a Deployment is present", f"{len(deployments)} found")

# What the replicas need of the Deployment.
for name, d in deployments:
    pod = d["spec"]["template"]["spec"]
    c = pod["containers"][0]
    env = {e["name"]: e for e in c.get("env", [])}
    args = c.get("args", [])
    pod_ip = env.get("POD_IP", {}).get("valueFrom", {}).get("fieldRef", {}).get("fieldPath")
    adv = args[args.index("--advertise-url") + 1] if "--advertise-url" in args else None
    report(pod_ip == "status.podIP" and adv is not None and "$(POD_IP)" in adv,
           f"{name} advertise URL", f"POD_IP from {pod_ip}, --advertise-url {adv}")
    report(d["spec"].get("replicas", 1) >= 2, f"{name} replicas", f"{d['spec'].get('replicas')}")
    rp = c.get("readinessProbe", {}).get("httpGet", {}).get("path")
    lp = c.get("livenessProbe", {}).get("httpGet", {}).get("path")
    report(rp == "/readyz" and lp == "/healthz", f"{name} probes", f"readiness {rp}, liveness {lp}")
    modes = [v["secret"].get("defaultMode") for v in pod.get("volumes", []) if "secret" in v]
    report(bool(modes) and all(m in (0o400, 0o600, 0o440) for m in modes), f"{name} secret mode",
           f"defaultMode {[oct(m) if isinstance(m, int) else m for m in modes]}")
    sc = pod.get("securityContext", {})
    report(sc.get("runAsNonRoot") is True and sc.get("runAsUser", 0) != 0, f"{name} non-root",
           f"runAsNonRoot={sc.get('runAsNonRoot')} runAsUser={sc.get('runAsUser')}")
    grace = pod.get("terminationGracePeriodSeconds", 30)
    pre = (c.get("lifecycle", {}).get("preStop", {}).get("sleep") or {}).get("seconds", 0)
    report(grace > pre, f"{name} grace period", f"terminationGracePeriodSeconds {grace} > preStop sleep {pre}"
           " (+ the config's shutdown_grace)")

print(f"{passed} passed, {failed} failed")
sys.exit(1 if failed else 0)
PY
)
rc=$?
ci_client_counts "$out" "$rc" || log "the validator printed no summary (exit $rc)"
ci_add "$CI_P" "$CI_F"
ci_result
[ "$CI_FAILED" -eq 0 ]
