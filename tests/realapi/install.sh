#!/usr/bin/env bash
# Install a real kube-apiserver for the realapi tests (tests/realapi/) and bench/apiserver.py.
#
#   tests/realapi/install.sh          # idempotent: skips every step whose result exists
#
# Builds Kubernetes v1.20.2's kube-apiserver from Debian bookworm's `kubernetes` source package
# (its Go dependencies are vendored: no network beyond the Debian archive), with the two patches
# Debian's Go 1.19 needs, and extracts Debian's kubectl 1.20 next to it. etcd comes from Debian's
# `etcd-server`/`etcd-client` packages. About 5 minutes and 2 GB of disk on 2 cores, once.
#
# Result, in $TOLLGATE_REALAPI_DIR (default ${XDG_CACHE_HOME:-~/.cache}/tollgate/realapi):
#   bin/kube-apiserver  bin/kubectl   (etcd and etcdctl are on PATH from the apt packages)
# The tests find them there; nothing is installed outside that directory except the apt packages.
#
# Needs root (or the packages below already installed) and a Debian bookworm archive with deb-src
# (enabled here when missing).
set -euo pipefail

ROOT=${TOLLGATE_REALAPI_DIR:-${XDG_CACHE_HOME:-$HOME/.cache}/tollgate/realapi}
BIN=$ROOT/bin
SRC=$ROOT/src
DEBS=$ROOT/debs
K8S_VERSION=1.20.2
REFLECT2_VERSION=1.0.2-2

log() { printf '[realapi-install %s] %s\n' "$(date +%H:%M:%S)" "$*" >&2; }
die() { log "error: $*"; exit 1; }
as_root() { if [[ $(id -u) == 0 ]]; then "$@"; elif command -v sudo >/dev/null; then sudo "$@"; else die "need root for: $*"; fi; }

step() { # step NAME FUNCTION: run it, log its wall time
  local name=$1 t0=$SECONDS
  "$2"
  log "$name: done in $((SECONDS - t0)) s"
}

apt_packages() {
  local need=() tool pkg
  for pair in go:golang-go etcd:etcd-server etcdctl:etcd-client rsync:rsync make:make \
              dpkg-source:dpkg-dev openssl:openssl curl:curl; do
    tool=${pair%%:*} pkg=${pair#*:}
    command -v "$tool" >/dev/null || need+=("$pkg")
  done
  if ((${#need[@]} == 0)); then log "apt: every package present"; return 0; fi
  log "apt: installing ${need[*]}"
  as_root apt-get update -qq
  # No service is started: the tests run their own etcd.
  as_root env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "${need[@]}"
}

enable_deb_src() {
  # `apt-get source` needs deb-src entries; Debian's images ship with `Types: deb` only.
  local f=/etc/apt/sources.list.d/debian.sources
  if [[ -f $f ]] && grep -q '^Types: deb$' "$f"; then
    log "apt: enabling deb-src in $f"
    as_root sed -i 's/^Types: deb$/Types: deb deb-src/' "$f"
  elif [[ -f /etc/apt/sources.list ]] && grep -q '^deb ' /etc/apt/sources.list \
       && ! grep -q '^deb-src ' /etc/apt/sources.list; then
    log "apt: enabling deb-src in /etc/apt/sources.list"
    as_root sed -i '/^deb /{p;s/^deb /deb-src /}' /etc/apt/sources.list  # each deb line, then its deb-src twin
  fi
  as_root apt-get update -qq
}

# apt_source PACKAGE[=VERSION]: download a Debian source package into $DEBS (no build, no root needed)
apt_source() {
  (cd "$DEBS" && apt-get source --download-only "$1" >/dev/null 2>&1) && return 0
  enable_deb_src
  (cd "$DEBS" && apt-get source --download-only "$1" >/dev/null)
}

fetch_source() {
  if [[ -d $SRC/cmd/kube-apiserver ]]; then log "source: $SRC present"; return 0; fi
  mkdir -p "$DEBS"
  ls "$DEBS"/kubernetes_*.dsc >/dev/null 2>&1 || apt_source kubernetes
  rm -rf "$SRC.tmp"
  dpkg-source -x "$(ls "$DEBS"/kubernetes_*.dsc | head -1)" "$SRC.tmp" >/dev/null
  grep -q "gitVersion.*v$K8S_VERSION\|$K8S_VERSION" "$SRC.tmp/debian/changelog" \
    || log "warning: Debian's kubernetes source is not $K8S_VERSION (see $SRC.tmp/debian/changelog)"
  mv "$SRC.tmp" "$SRC"
}

fetch_kubectl() {
  # Debian's kubectl 1.20, version-matched to the server. Extracted, not installed: /usr/bin/kubectl
  # may belong to another package.
  if [[ -x $BIN/kubectl ]]; then log "kubectl: $BIN/kubectl present"; return 0; fi
  mkdir -p "$DEBS" "$BIN"
  ls "$DEBS"/kubernetes-client_*.deb >/dev/null 2>&1 || (cd "$DEBS" && apt-get download kubernetes-client >/dev/null)
  rm -rf "$ROOT/kubectl-deb"
  dpkg-deb -x "$(ls "$DEBS"/kubernetes-client_*.deb | head -1)" "$ROOT/kubectl-deb"
  ln -sfn "$ROOT/kubectl-deb/usr/bin/kubectl" "$BIN/kubectl"
}

patch_reflect2() {
  # Kubernetes 1.20 vendors github.com/modern-go/reflect2 v1.0.1, whose linknamed mapiterinit has the
  # signature of Go < 1.18: built with Go 1.19 the server dies ("fatal error: fault ... aeshashbody ...
  # UnsafeMapType.UnsafeIterate") on the first custom-resource create. v1.0.2 (go_above_118.go) fixes
  # it; Debian ships its source.
  local v=$SRC/vendor/github.com/modern-go/reflect2 d=$DEBS/reflect2
  if [[ -f $v/go_above_118.go ]]; then log "reflect2: already v1.0.2"; return 0; fi
  ls "$DEBS"/golang-github-modern-go-reflect2_1.0.2*.dsc >/dev/null 2>&1 \
    || apt_source "golang-github-modern-go-reflect2=$REFLECT2_VERSION"
  rm -rf "$d"
  dpkg-source -x "$(ls "$DEBS"/golang-github-modern-go-reflect2_1.0.2*.dsc | head -1)" "$d" >/dev/null
  [[ -f $d/go_above_118.go ]] || die "reflect2 1.0.2 source has no go_above_118.go"
  rm -f "$v"/*.go "$v"/*.s
  cp "$d"/*.go "$d"/*.s "$v"/
  sed -i 's|github.com/modern-go/reflect2 v1.0.1|github.com/modern-go/reflect2 v1.0.2|g' "$SRC/vendor/modules.txt" "$SRC/go.mod"
  rm -f "$BIN/kube-apiserver"  # rebuild
}

patch_openapi_zero_string() {
  # The vendored go-openapi and kube-openapi validators test "zero value?" with
  # reflect.DeepEqual(reflect.Zero(T), v); under Go >= 1.19 that reads every "" as null, and the server
  # rejects any custom resource holding an empty string ("must be of type string: null"), such as a
  # policy with apiGroups: [""]. Skip that test for strings.
  local f marker=TOLLGATE-ZERO-STRING-PATCH found=0
  for f in "$SRC/vendor/github.com/go-openapi/validate/type.go" \
           "$SRC/vendor/k8s.io/kube-openapi/pkg/validation/validate/type.go"; do
    [[ -f $f ]] || continue
    found=1
    grep -q "$marker" "$f" && continue
    sed -i "s|if data == nil \|\| reflect.DeepEqual(reflect.Zero(reflect.TypeOf(data)), reflect.ValueOf(data)) {|if data == nil \|\| (reflect.TypeOf(data).Kind() != reflect.String \&\& reflect.DeepEqual(reflect.Zero(reflect.TypeOf(data)), reflect.ValueOf(data))) { // $marker|" "$f"
    grep -q "$marker" "$f" || die "the zero-string patch did not apply to $f"
    rm -f "$BIN/kube-apiserver"  # rebuild
  done
  ((found)) || die "no vendored openapi validate/type.go found to patch"
}

build_apiserver() {
  if [[ -x $BIN/kube-apiserver ]]; then log "build: $BIN/kube-apiserver present"; return 0; fi
  mkdir -p "$BIN" "$ROOT/gohome"
  # GOPATH mode from vendor/ (hack/lib sets it up); `make` also generates the OpenAPI definitions a
  # plain `go build` would miss. Offline.
  (cd "$SRC" && env -u GOFLAGS HOME="$ROOT/gohome" GOCACHE="$ROOT/gohome/go-build" CGO_ENABLED=0 \
      make WHAT=cmd/kube-apiserver >"$ROOT/build.log" 2>&1) || { tail -40 "$ROOT/build.log" >&2; die "build failed (log: $ROOT/build.log)"; }
  cp "$SRC/_output/bin/kube-apiserver" "$BIN/kube-apiserver.tmp"
  mv "$BIN/kube-apiserver.tmp" "$BIN/kube-apiserver"
}

main() {
  mkdir -p "$ROOT" "$BIN" "$DEBS"
  # One install at a time per cache directory (two builds would only fight over 2 cores).
  exec 9>"$ROOT/.install.lock"
  flock 9
  local t0=$SECONDS
  step apt apt_packages
  step source fetch_source
  step kubectl fetch_kubectl
  step patch-reflect2 patch_reflect2
  step patch-openapi patch_openapi_zero_string
  step build build_apiserver
  log "$("$BIN/kube-apiserver" --version), $("$BIN/kubectl" version --client --short 2>/dev/null || "$BIN/kubectl" version --client)"
  log "installed in $ROOT in $((SECONDS - t0)) s"
}

main "$@"
