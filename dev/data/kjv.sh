#!/usr/bin/env bash
# Builds the byte-level KJV corpus (data/kjv/kjv_{train,val,tokenizer}.bin) from Debian's bible-kjv.
# Installs bible-kjv first when the `bible` command is missing and we are root. See kjv.py.
# Usage: dev/data/kjv.sh [--out-dir DIR] [--force]
set -euo pipefail
if ! command -v bible >/dev/null 2>&1; then
    if [ "$(id -u)" -eq 0 ]; then
        apt-get install -y bible-kjv >&2 || { apt-get update >&2 && apt-get install -y bible-kjv >&2; }
    else
        echo "kjv.sh: error: the \`bible\` command is missing; run as root or: sudo apt-get install bible-kjv" >&2
        exit 1
    fi
fi
exec python3 "$(dirname "$0")/kjv.py" "$@"
