#!/usr/bin/env bash
# End-to-end tests on kind: build the image, deploy Tollgate with manifests/,
# apply policies/, run tests/e2e/test_e2e.py against the cluster.
#
#   tests/e2e/run.sh                  # create cluster, test, delete cluster
#   KEEP_CLUSTER=1 tests/e2e/run.sh   # keep it afterwards (and reuse it next time)
#
# Environment:
#   CLUSTER_NAME    kind cluster name                  (default tollgate-e2e)
#   IMAGE           image tag built and loaded         (default tollgate:e2e)
#   KIND_NODE_IMAGE kindest/node image, e.g. kindest/node:v1.31.0 (default: kind's)
#   KEEP_CLUSTER    1 = do not delete the cluster at the end
#   SKIP_BUILD      1 = do not rebuild the image (it must exist locally)
#   PYTHON          interpreter with tollgate + test extras (default .venv/bin/python)
#   PYTEST_ARGS     extra pytest arguments, e.g. "-k privileged -x"
# Needs: docker (with a running engine), kind, kubectl >= 1.30 (kustomize built in).
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
CLUSTER_NAME="${CLUSTER_NAME:-tollgate-e2e}"
IMAGE="${IMAGE:-tollgate:e2e}"
KEEP_CLUSTER="${KEEP_CLUSTER:-0}"
NAMESPACE=tollgate-system
if [[ -z "${PYTHON:-}" ]]; then
  if [[ -x "$ROOT/.venv/bin/python" ]]; then PYTHON="$ROOT/.venv/bin/python"; else PYTHON=python3; fi
fi
# The `tollgate` console script, run by the chosen interpreter.
TOLLGATE=("$PYTHON" -c "import sys; from webhook.cli.main import main; sys.exit(main())")

log() { printf '\n=== %s\n' "$*" >&2; }
die() { printf 'run.sh: %s\n' "$*" >&2; exit 1; }

for tool in docker kind kubectl; do
  command -v "$tool" >/dev/null || die "$tool not found on PATH"
done
docker info >/dev/null 2>&1 || die "docker is installed but no engine answers (docker info failed)"

WORK="$(mktemp -d)"
CONTEXT="kind-$CLUSTER_NAME"
KUBECTL=(kubectl --context "$CONTEXT")
created_cluster=0

cleanup() {
  local rc=$?
  if [[ $rc -ne 0 ]] && kind get clusters 2>/dev/null | grep -qx "$CLUSTER_NAME"; then
    log "failure: tollgate pods and logs"
    "${KUBECTL[@]}" -n "$NAMESPACE" get pods -o wide || true
    "${KUBECTL[@]}" -n "$NAMESPACE" logs -l app.kubernetes.io/name=tollgate --tail=100 --prefix || true
  fi
  if [[ "$KEEP_CLUSTER" != 1 && $created_cluster == 1 ]]; then
    log "deleting cluster $CLUSTER_NAME"
    kind delete cluster --name "$CLUSTER_NAME" || true
  fi
  rm -rf "$WORK"
  exit $rc
}
trap cleanup EXIT

# --- cluster -----------------------------------------------------------------
if kind get clusters 2>/dev/null | grep -qx "$CLUSTER_NAME"; then
  log "reusing cluster $CLUSTER_NAME"
  [[ "$KEEP_CLUSTER" == 1 ]] || created_cluster=1  # it will be deleted at the end
else
  log "creating cluster $CLUSTER_NAME"
  node_image=()
  [[ -n "${KIND_NODE_IMAGE:-}" ]] && node_image=(--image "$KIND_NODE_IMAGE")
  kind create cluster --name "$CLUSTER_NAME" --config "$ROOT/tests/e2e/kind-config.yaml" \
    "${node_image[@]}" --wait 180s
  created_cluster=1
fi

# --- image -------------------------------------------------------------------
if [[ "${SKIP_BUILD:-0}" != 1 ]]; then
  log "building $IMAGE"
  DOCKER_BUILDKIT=1 docker build -t "$IMAGE" "$ROOT"
fi
log "loading $IMAGE into kind"
kind load docker-image "$IMAGE" --name "$CLUSTER_NAME"

# --- certificates and manifests ------------------------------------------------
# A throw-away overlay on top of manifests/: certificates never land in the
# source tree, and the image is swapped for the one just built.
log "generating serving certificate"
cp -r "$ROOT/manifests" "$WORK/base"
rm -f "$WORK/base/tls/"*.crt "$WORK/base/tls/"*.key
"${TOLLGATE[@]}" certs --out-dir "$WORK/base/tls" --service tollgate --namespace "$NAMESPACE" >"$WORK/ca-bundle.txt"
for f in ca.crt tls.crt tls.key; do
  [[ -s "$WORK/base/tls/$f" ]] || die "tollgate certs did not write $f"
done
mkdir -p "$WORK/overlay"
# Read access for the examples' spec.references (Ingresses, Deployments): the references component.
cat >"$WORK/overlay/kustomization.yaml" <<EOF
apiVersion: kustomize.config.k8s.io/v1beta1
kind: Kustomization
resources:
- ../base
components:
- ../base/components/references
images:
- name: tollgate
  newName: ${IMAGE%:*}
  newTag: ${IMAGE##*:}
EOF

log "applying manifests/"
"${KUBECTL[@]}" apply -k "$WORK/overlay"
"${KUBECTL[@]}" wait --for=condition=Established --timeout=60s \
  crd/clusteradmissionpolicies.tollgate.dev crd/admissionpolicies.tollgate.dev
"${KUBECTL[@]}" -n "$NAMESPACE" rollout status deployment/tollgate --timeout=180s

# --- policies ------------------------------------------------------------------
# Installed as a user would: the kustomizations under policies/ name only what
# belongs in a cluster (policies and params ConfigMaps), never test inputs.
log "applying policies/"
"${KUBECTL[@]}" create namespace team-a --dry-run=client -o yaml | "${KUBECTL[@]}" apply -f -
"${KUBECTL[@]}" apply -k "$ROOT/policies/pod-security/baseline"
"${KUBECTL[@]}" apply -k "$ROOT/policies/examples"

# The leader writes the webhook rules from the policies (nothing is sent to
# Tollgate before that), copying the mounted ca.crt into caBundle. Then a
# server-side dry run of a Pod proves the API server reaches the webhook
# through the Service; it goes through admission without writing anything.
log "waiting for the generated webhook configuration"
for _ in $(seq 1 60); do
  hooks=$("${KUBECTL[@]}" get validatingwebhookconfiguration tollgate -o jsonpath='{.webhooks[*].name}' 2>/dev/null || true)
  [[ -n "$hooks" ]] && break
  sleep 2
done
[[ -n "$hooks" ]] || die "the leader never wrote the webhook rules"

log "waiting for the webhook to answer"
probe_webhook() {  # admitted, or denied by Tollgate itself (the example policies may deny it): reached
  "${KUBECTL[@]}" run tollgate-e2e-probe -n default --image=registry.k8s.io/pause:3.10 \
    --dry-run=server -o name >/dev/null 2>"$WORK/probe.err" ||
    grep -q 'admission webhook "validate.tollgate.dev" denied' "$WORK/probe.err"
}
for _ in $(seq 1 60); do
  probe_webhook && break
  sleep 2
done
probe_webhook || { cat "$WORK/probe.err" >&2; die "webhook not reachable"; }

# --- tests ---------------------------------------------------------------------
log "running e2e tests"
export TOLLGATE_E2E=1 TOLLGATE_E2E_CONTEXT="$CONTEXT"
# shellcheck disable=SC2086  # PYTEST_ARGS is split on purpose
"$PYTHON" -m pytest "$ROOT/tests/e2e" -m e2e -v -p no:cacheprovider ${PYTEST_ARGS:-}
