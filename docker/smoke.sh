#!/usr/bin/env bash
# docker/smoke.sh: prove the devplan image works by building and running it with rootful podman.
#
# Steps (one line each, with timings): install podman/runc/debootstrap if missing; write podman's
# configuration into a private work directory (CONTAINERS_CONF / CONTAINERS_STORAGE_CONF; nothing
# system-wide is changed beyond installing packages); make a Debian bookworm base image with
# debootstrap (cached between runs); build the image; check it refuses to start without an API key
# (it listens on 0.0.0.0: exit 2 naming DEVPLAN_API_KEYS and DEVPLAN_ALLOW_ANONYMOUS); run it with a
# key on a loopback port; wait until healthy; POST a /plan example and check the answer (and, on the
# full image, that TVMScript which would run code in TVM's parser is a 400 and ran nothing); check it runs as non-root; stop it
# and check it stopped gracefully; clean up.
#
# Exit status: 0 when every step passed; 1 on any failure; 0 with a "SKIPPED: <reason>" line only when
# the container tools cannot be installed at all (no root, no apt-get, packages unavailable).
#
# Environment (all optional):
#   DEVPLAN_SMOKE_VARIANTS    image targets to build and run, in order      (default: "plan"; or "plan full")
#                             "farm": the build-farm stage (docs/farm.md): Debian's redis-server, moto's
#                             S3 server, the API and two workers of the full image, each a container;
#                             three models compiled through the queue, one worker killed mid-job
#   DEVPLAN_SMOKE_CACHE       where the base image tarball is cached        (default: ~/.cache/devplan-smoke)
#   DEVPLAN_SMOKE_KEEP_STORAGE=1  keep podman's storage in the cache dir (layer cache: fast reruns)
#   DEVPLAN_SMOKE_KEEP_WORK=1     do not delete the work directory (logs) at the end
#   DEVPLAN_SMOKE_CA          CA bundle handed to the build as secret hostca (default: the system bundle)
#   DEVPLAN_SMOKE_MIRROR      Debian mirror for debootstrap           (default: the one apt already uses)
#   DEVPLAN_SMOKE_STOP_TIMEOUT  seconds podman waits after SIGTERM before SIGKILL (default: 30)

set -Eeuo pipefail

REPO=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
VARIANTS=${DEVPLAN_SMOKE_VARIANTS:-plan}
CACHE=${DEVPLAN_SMOKE_CACHE:-${HOME:-/root}/.cache/devplan-smoke}
STOP_TIMEOUT=${DEVPLAN_SMOKE_STOP_TIMEOUT:-30}
SUITE=bookworm
BASE_PACKAGES=python3,python3-venv,python3-pip,ca-certificates
TAG_SUFFIX=smoke-$$
# The containers' API key (the image listens on 0.0.0.0, where the server needs one); smoke_http.py
# sends it.
DEVPLAN_SMOKE_KEY=$(python3 -c 'import secrets; print(secrets.token_hex(24))')
export DEVPLAN_SMOKE_KEY
WORK=""
CONTAINER=""
VOLUME=""
IMAGE=""
FARM_CONTAINERS=()
FARM_IMAGES=()
T_START=$(date +%s.%N)

log() { printf '[smoke] %s\n' "$*"; }
elapsed() { python3 -c "import sys; print(f'{float(sys.argv[2]) - float(sys.argv[1]):.1f}s')" "$1" "$(date +%s.%N)"; }

# step NAME COMMAND...: run COMMAND (errexit on, in a subshell) with its output in $WORK/NAME.log;
# print one line "name ok time note", or "name FAILED time" with the log's tail, and exit 1.
step() {
    local name=$1; shift
    local logf=$WORK/$name.log t0 rc
    t0=$(date +%s.%N)
    set +e
    (set -Eeuo pipefail; "$@") >"$logf" 2>&1
    rc=$?
    set -e
    if ((rc == 0)); then
        log "$(printf '%-24s ok     %7s  %s' "$name" "$(elapsed "$t0")" "$STEP_NOTE")"
        STEP_NOTE=""
        return 0
    fi
    log "$(printf '%-24s FAILED %7s  %s' "$name" "$(elapsed "$t0")" "$STEP_NOTE")"
    tail -n 40 "$logf" | sed 's/^/[smoke]   | /'
    log "FAILED at step $name after $(elapsed "$T_START") (full log: $logf, kept)"
    DEVPLAN_SMOKE_KEEP_WORK=1
    exit 1
}
STEP_NOTE=""

skip() { echo "SKIPPED: $*"; exit 0; }

# --------------------------------------------------------------------------------------------------
# Tools: rootful podman needs root; install what is missing from Debian's packages.
[[ $(id -u) -eq 0 ]] || {
    if command -v sudo >/dev/null && sudo -n true 2>/dev/null; then exec sudo -n -E "$0" "$@"; fi
    skip "rootful podman needs root (or password-less sudo); running as uid $(id -u)"
}
command -v python3 >/dev/null || skip "python3 is needed on the host for the HTTP checks"

missing=()
for tool in podman runc debootstrap; do command -v "$tool" >/dev/null || missing+=("$tool"); done
if ((${#missing[@]})); then
    command -v apt-get >/dev/null || skip "${missing[*]} missing and no apt-get to install them"
    t0=$(date +%s.%N)
    if ! { apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq \
            --no-install-recommends podman runc debootstrap containernetworking-plugins iptables; } \
            >/tmp/devplan-smoke-apt.log 2>&1; then
        tail -n 20 /tmp/devplan-smoke-apt.log | sed 's/^/[smoke]   | /'
        skip "could not install ${missing[*]} with apt-get (log: /tmp/devplan-smoke-apt.log)"
    fi
    log "$(printf '%-24s ok     %7s  %s' install-tools "$(elapsed "$t0")" "(installed ${missing[*]})")"
else
    log "$(printf '%-24s ok     %7s  %s' install-tools 0.0s "(already installed)")"
fi
for tool in podman runc debootstrap; do
    command -v "$tool" >/dev/null || skip "$tool still not found after installing packages"
done

# --------------------------------------------------------------------------------------------------
# Private podman configuration: runc (crun fails on this cgroup setup), cgroupfs, file events,
# explicit ulimits (the defaults exceed what the sandbox allows), overlay storage in our directory.
mkdir -p "$CACHE"
WORK=$(mktemp -d "${TMPDIR:-/tmp}/devplan-smoke.XXXXXX")
if [[ ${DEVPLAN_SMOKE_KEEP_STORAGE:-0} == 1 ]]; then STORE=$CACHE/storage; else STORE=$WORK/storage; fi
mkdir -p "$STORE" "$WORK/tmp" "$WORK/cni" "$WORK/libpod"

cleanup() {
    local rc=$?
    set +e
    if [[ -n $CONTAINER ]]; then podman rm -f -t 0 "$CONTAINER" >/dev/null 2>&1; fi
    if [[ -n $VOLUME ]]; then podman volume rm -f "$VOLUME" >/dev/null 2>&1; fi
    if [[ -n $IMAGE ]]; then podman rmi -f "$IMAGE" >/dev/null 2>&1; fi
    for c in "${FARM_CONTAINERS[@]}"; do podman rm -f -t 0 "$c" >/dev/null 2>&1; done
    if ((${#FARM_CONTAINERS[@]})); then podman volume rm -f "${FARM_CONTAINERS[0]}" >/dev/null 2>&1; fi
    if [[ ${DEVPLAN_SMOKE_KEEP_STORAGE:-0} != 1 ]]; then
        for i in "${FARM_IMAGES[@]}"; do podman rmi -f "$i" >/dev/null 2>&1; done
    fi
    if [[ ${DEVPLAN_SMOKE_KEEP_STORAGE:-0} != 1 && -d $STORE ]]; then
        podman rm -a -f -t 0 >/dev/null 2>&1
        podman rmi -a -f >/dev/null 2>&1
        # The overlay driver bind-mounts its home onto itself; undo every mount under $WORK.
        findmnt -rn -o TARGET | grep -F "$WORK/" | sort -r | while read -r m; do umount -l "$m"; done
    fi
    if [[ ${DEVPLAN_SMOKE_KEEP_WORK:-0} == 1 ]]; then
        log "work directory kept: $WORK"
    else
        rm -rf "$WORK"
    fi
    exit "$rc"
}

cat >"$WORK/containers.conf" <<EOF
[containers]
default_ulimits = ["nofile=16384:16384", "nproc=16384:16384"]

[network]
network_config_dir = "$WORK/cni"

[engine]
runtime = "runc"
cgroup_manager = "cgroupfs"
events_logger = "file"
events_logfile_path = "$WORK/events.log"
tmp_dir = "$WORK/libpod"
image_copy_tmp_dir = "$WORK/tmp"
EOF
cat >"$WORK/storage.conf" <<EOF
[storage]
driver = "overlay"
runroot = "$STORE/run"
graphroot = "$STORE/graph"
EOF
export CONTAINERS_CONF=$WORK/containers.conf CONTAINERS_STORAGE_CONF=$WORK/storage.conf TMPDIR=$WORK/tmp
# Only now, with podman pointed at our storage, may cleanup remove containers and images.
trap cleanup EXIT
trap 'exit 130' INT TERM

check_podman() {
    podman info --format '{{.Host.OCIRuntime.Name}} {{.Host.CgroupManager}} {{.Store.GraphDriverName}}' \
        | tee /dev/stderr | grep -q '^runc cgroupfs overlay$'
}
STEP_NOTE="(podman $(podman --version | awk '{print $3}'), storage: $STORE)"
step podman-config check_podman

# --------------------------------------------------------------------------------------------------
# Base image: debootstrap --variant=minbase of bookworm from the mirror apt already uses; cached.
detect_mirror() {
    local uri
    uri=$(
        {
            grep -hs -E '^\s*deb\s' /etc/apt/sources.list /etc/apt/sources.list.d/*.list 2>/dev/null \
                | awk -v s="$SUITE" '$0 !~ /\[/ && $3 == s {print $2} $0 ~ /\[/ {for (i=1;i<=NF;i++) if ($i == s) print $(i-1)}'
            for f in /etc/apt/sources.list.d/*.sources; do
                [[ -f $f ]] || continue
                awk -v s="$SUITE" 'BEGIN{RS=""} {u=""; ok=0; n=split($0, L, "\n");
                    for (i=1;i<=n;i++) { if (L[i] ~ /^URIs:/) { split(L[i], a, /[ \t]+/); u=a[2] }
                                         if (L[i] ~ /^Suites:/) { m=split(L[i], b, /[ \t]+/);
                                             for (j=2;j<=m;j++) if (b[j] == s) ok=1 } }
                    if (ok && u != "") print u }' "$f"
            done
        } | grep -v -i security | head -n 1
    )
    echo "${DEVPLAN_SMOKE_MIRROR:-${uri:-http://deb.debian.org/debian}}"
}
MIRROR=$(detect_mirror)
ARCH=$(dpkg --print-architecture 2>/dev/null || uname -m)
BASE_KEY=$(printf '%s|%s|%s|%s|%s|v1' "$SUITE" minbase "$BASE_PACKAGES" "$MIRROR" "$ARCH" | sha256sum | cut -c1-12)
BASE_TAR=$CACHE/base-$SUITE-$BASE_KEY.tar
BASE_IMAGE=localhost/devplan-base:$SUITE-$BASE_KEY

make_base_tar() {
    local root=$WORK/rootfs
    debootstrap --variant=minbase --include="$BASE_PACKAGES" "$SUITE" "$root" "$MIRROR"
    # Slim it the way Debian's -slim images are: no package caches, lists, docs, man pages,
    # translations; and keep later apt installs (the full variant's gcc) from adding them back.
    rm -rf "$root"/var/cache/apt/archives/*.deb "$root"/var/lib/apt/lists/* "$root"/var/log/*.log \
        "$root"/usr/share/man/* "$root"/usr/share/info/* "$root"/usr/share/locale/*
    find "$root/usr/share/doc" -mindepth 1 -not -name copyright -not -type d -delete
    cat >"$root/etc/dpkg/dpkg.cfg.d/90devplan-slim" <<'EOF'
path-exclude /usr/share/doc/*
path-include /usr/share/doc/*/copyright
path-exclude /usr/share/man/*
path-exclude /usr/share/info/*
path-exclude /usr/share/locale/*
EOF
    tar --numeric-owner --xattrs -C "$root" -cf "$BASE_TAR.partial" .
    mv "$BASE_TAR.partial" "$BASE_TAR"
    rm -rf "$root"
}
if [[ -s $BASE_TAR ]]; then
    log "$(printf '%-24s ok     %7s  %s' debootstrap-base 0.0s "(cached: $BASE_TAR)")"
else
    STEP_NOTE="($SUITE minbase from $MIRROR)"
    step debootstrap-base make_base_tar
fi
import_base() {
    podman import --change 'ENV LANG=C.UTF-8' --change 'CMD ["/bin/bash"]' "$BASE_TAR" "$BASE_IMAGE"
    podman run --rm "$BASE_IMAGE" python3 -c 'import sys, venv, ensurepip; assert sys.version_info[:2] == (3, 11), sys.version'
}
if podman image exists "$BASE_IMAGE"; then
    log "$(printf '%-24s ok     %7s  %s' import-base 0.0s "(in storage: $BASE_IMAGE)")"
else
    STEP_NOTE="($BASE_IMAGE)"
    step import-base import_base
fi

# --------------------------------------------------------------------------------------------------
# Per variant: build, run, healthy, plan, non-root, graceful stop.
CA=${DEVPLAN_SMOKE_CA:-}
if [[ -z $CA ]]; then
    for f in /etc/ssl/certs/ca-certificates.crt /etc/pki/tls/certs/ca-bundle.crt; do
        [[ -s $f ]] && { CA=$f; break; }
    done
fi
SECRET_ARGS=()
[[ -n $CA ]] && SECRET_ARGS=(--secret "id=hostca,src=$CA")

free_port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'; }

# --------------------------------------------------------------------------------------------------
# The build farm (variant "farm"): every piece in its own container on the host network (loopback
# ports), images built here on the debootstrap base: Debian's redis-server, moto's S3 server, the
# full image as the API (queue mode) and as two workers. docker/smoke_farm.py drives the checks.
farm_stage() {
    local t0 tag=$TAG_SUFFIX moto_pin redis_port s3_port api_port corpus
    t0=$(date +%s.%N)
    FARM_IMAGES=(localhost/devplan:full-$tag localhost/devplan-redis:$tag localhost/devplan-moto:$tag)
    STEP_NOTE="(${FARM_IMAGES[0]})"
    step build-farm-full podman build --format docker --file "$REPO/docker/Dockerfile" --target full \
        --build-arg "BASE=$BASE_IMAGE" "${SECRET_ARGS[@]}" --tag "${FARM_IMAGES[0]}" "$REPO"
    STEP_NOTE="(${FARM_IMAGES[1]}: Debian's redis-server)"
    step build-farm-redis podman build --format docker --file "$REPO/docker/farm/redis.Containerfile" \
        --build-arg "BASE=$BASE_IMAGE" "${SECRET_ARGS[@]}" --tag "${FARM_IMAGES[1]}" "$REPO/docker/farm"
    moto_pin=$(python3 -c 'import sys, tomllib; t = tomllib.load(open(sys.argv[1], "rb")); print(next(r for r in t["project"]["optional-dependencies"]["test"] if r.startswith("moto")))' "$REPO/pyproject.toml")
    STEP_NOTE="(${FARM_IMAGES[2]}: $moto_pin)"
    step build-farm-moto podman build --format docker --file "$REPO/docker/farm/moto.Containerfile" \
        --build-arg "BASE=$BASE_IMAGE" --build-arg "MOTO=$moto_pin" "${SECRET_ARGS[@]}" \
        --tag "${FARM_IMAGES[2]}" "$REPO/docker/farm"
    redis_port=$(free_port); s3_port=$(free_port); api_port=$(free_port)
    FARM_CONTAINERS=(devplan-farm-redis-$$ devplan-farm-s3-$$ devplan-farm-api-$$ devplan-farm-w1-$$ devplan-farm-w2-$$)
    local farm_env=(
        --env DEVPLAN_LOG_LEVEL=info
        --env "DEVPLAN_QUEUE_URL=redis://127.0.0.1:$redis_port/0"
        --env DEVPLAN_ARTIFACT_URL=s3://devplan/artifacts
        --env DEVPLAN_WORKER_HEARTBEAT_S=5
        --env DEVPLAN_WORKER_MAINTENANCE_S=2
        --env DEVPLAN_COMPILE_RETRIES=2
        --env "AWS_ENDPOINT_URL_S3=http://127.0.0.1:$s3_port"
        --env AWS_ACCESS_KEY_ID=smoke --env AWS_SECRET_ACCESS_KEY=smoke-secret --env AWS_DEFAULT_REGION=us-east-1
    )
    local hardening=(--network host --read-only --tmpfs /tmp --cap-drop ALL --security-opt no-new-privileges)
    run_farm() {
        podman volume create "${FARM_CONTAINERS[0]}"   # AOF; a new volume takes the image's /data owner
        podman run --detach --name "${FARM_CONTAINERS[0]}" --network host --cap-drop ALL --read-only \
            --volume "${FARM_CONTAINERS[0]}:/data" "${FARM_IMAGES[1]}" \
            --port "$redis_port" --bind 127.0.0.1 --appendonly yes --dir /data --save ""
        local i
        for ((i = 0; i < 100; i++)); do
            podman exec "${FARM_CONTAINERS[0]}" redis-cli -p "$redis_port" ping 2>/dev/null | grep -q PONG && break
            sleep 0.2
        done
        podman run --detach --name "${FARM_CONTAINERS[1]}" "${hardening[@]}" "${FARM_IMAGES[2]}" -H 127.0.0.1 -p "$s3_port"
        podman run --detach --name "${FARM_CONTAINERS[2]}" "${hardening[@]}" "${farm_env[@]}" \
            --env DEVPLAN_HOST=127.0.0.1 --env "DEVPLAN_PORT=$api_port" "${FARM_IMAGES[0]}"
        # The bucket (moto starts empty); from inside the API's container, which has boto3.
        podman exec "${FARM_CONTAINERS[2]}" python3 -c '
import time, boto3, botocore.exceptions
for _ in range(300):
    try:
        boto3.client("s3").create_bucket(Bucket="devplan"); break
    except (botocore.exceptions.EndpointConnectionError, botocore.exceptions.ConnectionClosedError):
        time.sleep(0.2)
else:
    raise SystemExit("the S3 server never answered")'
        podman run --detach --name "${FARM_CONTAINERS[3]}" "${hardening[@]}" "${farm_env[@]}" \
            "${FARM_IMAGES[0]}" worker --name farm-w1
        podman run --detach --name "${FARM_CONTAINERS[4]}" "${hardening[@]}" "${farm_env[@]}" \
            "${FARM_IMAGES[0]}" worker --name farm-w2
    }
    STEP_NOTE="(redis :$redis_port, s3 :$s3_port, api :$api_port, 2 workers)"
    step run-farm run_farm
    corpus=$REPO/../shared/corpus
    STEP_NOTE=""
    step farm-checks python3 "$REPO/docker/smoke_farm.py" "http://127.0.0.1:$api_port" "${FARM_CONTAINERS[0]}" \
        "$redis_port" "$corpus" "farm-w1=${FARM_CONTAINERS[3]}" "farm-w2=${FARM_CONTAINERS[4]}"
    sed 's/^/[smoke]   | /' "$WORK/farm-checks.log"
    for c in "${FARM_CONTAINERS[@]}"; do podman rm -f -t 0 "$c" >/dev/null 2>&1 || true; done
    podman volume rm -f "${FARM_CONTAINERS[0]}" >/dev/null 2>&1 || true
    FARM_CONTAINERS=()
    SUMMARY+=("farm: 3 models through the queue, a worker killed mid-job and its job finished, stage $(elapsed "$t0")")
    if [[ ${DEVPLAN_SMOKE_KEEP_STORAGE:-0} != 1 ]]; then  # kept: the next run's builds are cache hits
        for i in "${FARM_IMAGES[@]}"; do podman rmi -f "$i" >/dev/null 2>&1 || true; done
    fi
    FARM_IMAGES=()
}

SUMMARY=()
for variant in $VARIANTS; do
    if [[ $variant == farm ]]; then farm_stage; continue; fi
    IMAGE=localhost/devplan:$variant-$TAG_SUFFIX
    t_build=$(date +%s.%N)
    STEP_NOTE="($IMAGE)"
    step "build-$variant" podman build --format docker --file "$REPO/docker/Dockerfile" --target "$variant" \
        --build-arg "BASE=$BASE_IMAGE" "${SECRET_ARGS[@]}" --tag "$IMAGE" "$REPO"
    build_time=$(elapsed "$t_build")
    size=$(podman image inspect --format '{{.Size}}' "$IMAGE")
    size_mb=$(python3 -c "print(f'{$size / 1e6:.0f} MB')")

    check_image_config() {
        local user hc stopsig env
        user=$(podman image inspect --format '{{.Config.User}}' "$IMAGE")
        hc=$(podman image inspect --format '{{.Config.Healthcheck}}' "$IMAGE")
        stopsig=$(podman image inspect --format '{{.Config.StopSignal}}' "$IMAGE")
        echo "user=$user stopsignal=$stopsig healthcheck=$hc"
        [[ -n $user && $user != root && $user != 0 && $user != 0:* ]] || { echo "image user is root"; return 1; }
        [[ $hc == *healthz* ]] || { echo "HEALTHCHECK lost (build with --format docker)"; return 1; }
        [[ $stopsig == SIGTERM || $stopsig == 15 ]] || { echo "unexpected STOPSIGNAL $stopsig"; return 1; }
        # The CA secret served the build only: not in the environment, not in the file system.
        env=$(podman image inspect --format '{{.Config.Env}}' "$IMAGE")
        echo "env=$env"
        [[ $env != *PIP_CERT* && $env != *hostca* ]] || { echo "build secret leaked into ENV"; return 1; }
        podman run --rm --entrypoint /bin/sh "$IMAGE" -c \
            'test ! -e /run/secrets/hostca && test ! -e /etc/apt/apt.conf.d/99devplan-hostca' \
            || { echo "build secret left in the image"; return 1; }
    }
    STEP_NOTE="(size $size_mb)"
    step "image-config-$variant" check_image_config

    refuses_without_key() {
        local out code
        set +e
        out=$(podman run --rm --read-only --cap-drop ALL --security-opt no-new-privileges "$IMAGE" 2>&1)
        code=$?
        set -e
        echo "$out"
        echo "exit code $code"
        [[ $code == 2 ]] || { echo "expected exit 2 without DEVPLAN_API_KEYS on 0.0.0.0"; return 1; }
        [[ $out == *DEVPLAN_API_KEYS* && $out == *DEVPLAN_ALLOW_ANONYMOUS=1* ]] \
            || { echo "the refusal does not name DEVPLAN_API_KEYS and DEVPLAN_ALLOW_ANONYMOUS=1"; return 1; }
    }
    STEP_NOTE="(no DEVPLAN_API_KEYS: exit 2)"
    step "refuses-open-$variant" refuses_without_key

    PORT=$(free_port)
    CONTAINER=devplan-smoke-$variant-$$
    VOLUME=devplan-smoke-artifacts-$$
    run_container() {
        podman volume create "$VOLUME"
        # The key goes through the environment (`--env NAME` copies it), not the command line.
        DEVPLAN_API_KEYS=$DEVPLAN_SMOKE_KEY podman run --detach --name "$CONTAINER" --publish "127.0.0.1:$PORT:8000" \
            --volume "$VOLUME:/var/lib/devplan/artifacts" --stop-timeout "$STOP_TIMEOUT" \
            --env DEVPLAN_LOG_LEVEL=info --env DEVPLAN_GRACEFUL_TIMEOUT_S=20 --env DEVPLAN_API_KEYS \
            --memory 2g --cpus 2 --read-only --cap-drop ALL --security-opt no-new-privileges "$IMAGE"
    }
    STEP_NOTE="(127.0.0.1:$PORT -> 8000)"
    step "run-$variant" run_container

    wait_healthy() {
        local deadline=$((SECONDS + 120)) status
        while ((SECONDS < deadline)); do
            if podman healthcheck run "$CONTAINER"; then return 0; fi
            status=$(podman inspect --format '{{.State.Status}}' "$CONTAINER")
            [[ $status == running ]] || { echo "container is $status"; podman logs "$CONTAINER"; return 1; }
            sleep 1
        done
        echo "not healthy after 120 s"; podman logs "$CONTAINER"; return 1
    }
    step "healthy-$variant" wait_healthy

    STEP_NOTE=""
    step "http-$variant" python3 "$REPO/docker/smoke_http.py" "http://127.0.0.1:$PORT" "$variant"
    sed 's/^/[smoke]   | /' "$WORK/http-$variant.log"

    if [[ $variant == full ]]; then
        nothing_ran() { podman exec "$CONTAINER" test ! -e /tmp/devplan-smoke-pwned; }
        STEP_NOTE="(the attack's file /tmp/devplan-smoke-pwned is absent)"
        step "attack-ran-nothing-$variant" nothing_ran
        tvm_in_container() { podman exec -i "$CONTAINER" python3 - <"$REPO/docker/smoke_tvm.py"; }
        step "tvm-$variant" tvm_in_container
        sed 's/^/[smoke]   | /' "$WORK/tvm-$variant.log"
    fi

    check_non_root() {
        local pid procs
        pid=$(podman inspect --format '{{.State.Pid}}' "$CONTAINER")
        grep -E '^(Uid|Gid):' "/proc/$pid/status"
        if awk '/^Uid:/ {exit !($2 == 0 || $3 == 0)}' "/proc/$pid/status"; then
            echo "the server (host pid $pid) runs as root"; return 1
        fi
        # Every process of the container (the server and its planning pool), seen from the host.
        procs=$(podman top "$CONTAINER" huser user pid args)
        echo "$procs"
        if tail -n +2 <<<"$procs" | awk '$1 == "root" || $2 == "root" {found=1} END {exit !found}'; then
            echo "a process of the container runs as root"; return 1
        fi
    }
    STEP_NOTE="(uid $(podman image inspect --format '{{.Config.User}}' "$IMAGE"))"
    step "non-root-$variant" check_non_root

    stop_gracefully() {
        local t0 code oom stop_log=$WORK/stop-$variant.log took client=$WORK/inflight-$variant.json pid i
        # A plan that takes seconds is in flight when SIGTERM arrives: a graceful server finishes it.
        python3 "$REPO/docker/smoke_http.py" --inflight "http://127.0.0.1:$PORT" "$client" &
        pid=$!
        for ((i = 0; i < 100; i++)); do [[ -e ${client%.json}.sent ]] && break; sleep 0.1; done
        [[ -e ${client%.json}.sent ]] || { echo "the in-flight request was not sent"; return 1; }
        sleep 0.2
        t0=$(date +%s.%N)
        podman stop --time "$STOP_TIMEOUT" "$CONTAINER" 2>"$stop_log"
        took=$(python3 -c "import sys; print(round(float(sys.argv[2]) - float(sys.argv[1]), 1))" "$t0" "$(date +%s.%N)")
        wait "$pid"
        code=$(podman inspect --format '{{.State.ExitCode}}' "$CONTAINER")
        oom=$(podman inspect --format '{{.State.OOMKilled}}' "$CONTAINER")
        cat "$stop_log"
        echo "exit code $code after ${took}s (timeout ${STOP_TIMEOUT}s), oom=$oom"
        echo "in-flight request: $(cat "$client")"
        podman logs --tail 5 "$CONTAINER" 2>&1
        if grep -q -i sigkill "$stop_log"; then echo "podman resorted to SIGKILL"; return 1; fi
        python3 -c "import sys; sys.exit(float(sys.argv[1]) >= float(sys.argv[2]))" "$took" "$STOP_TIMEOUT" \
            || { echo "stop took the whole timeout"; return 1; }
        # 0: the server returned after its shutdown; 143: it re-raised SIGTERM after a clean shutdown.
        [[ $code == 0 || $code == 143 ]] || { echo "unexpected exit code $code"; return 1; }
        python3 -c "import json, sys; r = json.load(open(sys.argv[1])); sys.exit(not (r['status'] == 200 and r['expressions'] > r['n']))" "$client" \
            || { echo "the in-flight request did not complete"; return 1; }
        python3 -c "import json, sys; sys.exit(not json.load(open(sys.argv[1]))['done_at'] > float(sys.argv[2]))" "$client" "$t0" \
            || { echo "the request was answered before the stop began: nothing was in flight (make it slower)"; return 1; }
        echo "$code" >"$WORK/exit-$variant"
        echo "exit $code, stop ${took}s, in-flight plan answered 200 after $(python3 -c "import json, sys; print(json.load(open(sys.argv[1]))['seconds'])" "$client")s" >"$WORK/stop-note-$variant"
    }
    step "graceful-stop-$variant" stop_gracefully
    sed 's/^/[smoke]   | /' "$WORK/stop-note-$variant"
    podman rm -f -t 0 "$CONTAINER" >/dev/null 2>&1 || true
    podman volume rm -f "$VOLUME" >/dev/null 2>&1 || true
    CONTAINER=""; VOLUME=""
    SUMMARY+=("$variant: image $size_mb, build $build_time, exit code $(cat "$WORK/exit-$variant")")
    podman rmi -f "$IMAGE" >/dev/null 2>&1 || true
    IMAGE=""
done

for line in "${SUMMARY[@]}"; do log "summary $line"; done
log "PASSED in $(elapsed "$T_START")"
