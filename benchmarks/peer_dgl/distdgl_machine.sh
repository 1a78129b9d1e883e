#!/usr/bin/env bash
# One simulated DistDGL machine for benchmarks.peer_dgl: run inside `unshare --mount` so that the
# tmpfs mounted on /dev/shm is private to this machine's graph server and trainer.
#   distdgl_machine.sh PYTHON MACHINE_ID [trainer arguments...]
# Environment: DGL_IP_CONFIG, DGL_CONF_PATH, DGL_NUM_CLIENT, WORLD_SIZE, MASTER_ADDR, MASTER_PORT.
set -euo pipefail
PYTHON="$1"; MACHINE="$2"; shift 2
HERE="$(cd "$(dirname "$0")" && pwd)"
mount -t tmpfs -o size=8g tmpfs /dev/shm
export DGL_DIST_MODE=distributed DGL_NUM_SERVER=1 DGL_NUM_SAMPLER=0 DGL_GROUP_ID=0
export DGL_GRAPH_FORMAT=csc DGL_MACHINE_ID="$MACHINE"
DGL_ROLE=server DGL_SERVER_ID="$MACHINE" "$PYTHON" "$HERE/distdgl.py" server &
export DGL_SERVER_PID=$!
DGL_ROLE=client "$PYTHON" "$HERE/distdgl.py" trainer "$@"
wait "$DGL_SERVER_PID"
