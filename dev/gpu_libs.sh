#!/usr/bin/env bash
# Where the GPU build finds cuBLASLt, NCCL, cuDNN and NVRTC and their headers: in the CUDA toolkit
# that nvcc belongs to, else in the linker's cache (ldconfig -p), else in the nvidia/*/lib and
# nvidia/*/include folders of a Python's site-packages (PyTorch's wheels bring them there:
# nvidia/cu13/lib/libcublasLt.so.13, nvidia/nccl/lib/libnccl.so.2, nvidia/cudnn/lib/libcudnn.so.9,
# often with no unversioned name to link against). A folder with a path component named compat
# or stubs is never taken: CUDA's compat folder holds a driver library that fails every CUDA
# program with error 803 where the installed driver is older, and stubs hold link-only fakes.
#
#   bash dev/gpu_libs.sh find LIB...          one line per library: LIB, where (toolkit, ldconfig, a
#                                             Python), its file and its header's folder; exit 1 if
#                                             one is missing
#   bash dev/gpu_libs.sh has LIB              exit 0 where LIB is found
#   bash dev/gpu_libs.sh cflags LIB...        nvcc flags for the headers of those found outside the
#                                             toolkit (-isystem: searched after the toolkit's own)
#   bash dev/gpu_libs.sh ldflags DIR LIB...   nvcc flags to link those found outside the toolkit: an
#                                             unversioned link to each made in DIR, -L DIR, and an
#                                             rpath (DT_RPATH) to the site-packages folders
#   bash dev/gpu_libs.sh ldpath LIB...        LD_LIBRARY_PATH to run them: the toolkit and
#                                             site-packages folders used, then the inherited
#                                             LD_LIBRARY_PATH less any compat or stubs folder
#
# LIB is cublasLt, nccl, cudnn or nvrtc. Environment (the tests use it): GPU_LIBS_PYTHONS, the
# Pythons asked for site-packages in order (default "python3 /usr/bin/python3": the one on PATH
# first); GPU_LIBS_SYSTEM_DIRS and GPU_LIBS_SYSTEM_INC, colon-separated library and header folders
# searched instead of the toolkit's, ldconfig's and /usr/include (set empty: none).
set -u

die() { echo "gpu_libs.sh: error: $*" >&2; exit 2; }

header_of() {
    case "$1" in
        cublasLt) echo cublasLt.h ;;
        nccl) echo nccl.h ;;
        cudnn) echo cudnn.h ;;
        nvrtc) echo nvrtc.h ;;
        *) die "unknown library '$1' (cublasLt, nccl, cudnn or nvrtc)" ;;
    esac
}

# a path with a folder named compat or stubs in it
banned() { case "/$1/" in */compat/* | */stubs/*) return 0 ;; esac; return 1; }

# the toolkit's root: the folder above nvcc's bin (NVCC, else nvcc on PATH)
toolkit_root() {
    local nv
    nv=$(command -v "${NVCC:-nvcc}" 2>/dev/null) || return 1
    nv=$(readlink -f "$nv") || return 1
    dirname "$(dirname "$nv")"
}

TK=""
TK=$(toolkit_root) || TK=""

# the folders nvcc links from (its own -L: lib64, targets/*/lib), unless GPU_LIBS_SYSTEM_DIRS is set
toolkit_lib_dirs() {
    [ -n "${GPU_LIBS_SYSTEM_DIRS+set}" ] && return 0
    [ -n "$TK" ] || return 0
    local d
    for d in "$TK"/lib64 "$TK"/lib "$TK"/targets/*/lib; do [ -d "$d" ] && echo "$d"; done
}

# other folders the runtime loader knows: ldconfig's cache (or GPU_LIBS_SYSTEM_DIRS)
loader_lib_dirs() {
    if [ -n "${GPU_LIBS_SYSTEM_DIRS+set}" ]; then
        tr ':' '\n' <<< "$GPU_LIBS_SYSTEM_DIRS" | sed '/^$/d'
        return 0
    fi
    { ldconfig -p 2>/dev/null || /sbin/ldconfig -p 2>/dev/null; } |
        sed -n 's/.* => \(.*\)\/[^/]*$/\1/p' | awk '!seen[$0]++'
}

system_inc_dirs() {
    if [ -n "${GPU_LIBS_SYSTEM_INC+set}" ]; then
        tr ':' '\n' <<< "$GPU_LIBS_SYSTEM_INC" | sed '/^$/d'
        return 0
    fi
    local d
    for d in "$TK"/include "$TK"/targets/*/include /usr/include /usr/local/include; do [ -d "$d" ] && echo "$d"; done
}

# each Python's nvidia/ folders (nvidia is a namespace package: one per site-packages that has it),
# as "PYTHON<TAB>FOLDER"
SITE=""
SITE_DONE=0
site_nvidia_dirs() {
    if [ $SITE_DONE = 0 ]; then
        SITE_DONE=1
        local py path
        for py in ${GPU_LIBS_PYTHONS:-python3 /usr/bin/python3}; do
            path=$(command -v "$py" 2>/dev/null) || continue
            SITE+=$("$path" -c 'import nvidia, sys
for p in nvidia.__path__: print(sys.argv[1] + "\t" + p)' "$py" 2>/dev/null)$'\n'
        done
        SITE=$(printf '%s' "$SITE" | sed '/^$/d' | awk -F'\t' '!seen[$2]++')
    fi
    [ -n "$SITE" ] && printf '%s\n' "$SITE"
}

# the library file in folder DIR: lib<name>.so, else the shortest lib<name>.so.<version>
lib_in() {
    local dir=$1 name=$2 f best=""
    banned "$dir" && return 1
    [ -e "$dir/lib$name.so" ] && { echo "$dir/lib$name.so"; return 0; }
    for f in "$dir"/lib"$name".so.[0-9]*; do
        [ -e "$f" ] || continue
        if [ -z "$best" ] || [ ${#f} -lt ${#best} ]; then best=$f; fi
    done
    [ -n "$best" ] && echo "$best"
}

# locate LIB: sets WHERE (toolkit | ldconfig | system | the Python), FILE, INC (its header's folder)
locate() {
    local name=$1 h d f py
    h=$(header_of "$name") || exit 2
    WHERE="" FILE="" INC=""
    while read -r d; do
        [ -n "$d" ] || continue
        if [ -e "$d/lib$name.so" ] && ! banned "$d"; then WHERE=toolkit FILE=$d/lib$name.so; break; fi
    done < <(toolkit_lib_dirs)
    if [ -z "$FILE" ]; then
        while read -r d; do
            [ -n "$d" ] || continue
            if f=$(lib_in "$d" "$name"); then
                WHERE=ldconfig FILE=$f
                [ -n "${GPU_LIBS_SYSTEM_DIRS+set}" ] && WHERE=system
                break
            fi
        done < <(loader_lib_dirs)
    fi
    while read -r d; do
        [ -n "$d" ] || continue
        if [ -e "$d/$h" ] && ! banned "$d"; then INC=$d; break; fi
    done < <(system_inc_dirs)
    local sys_inc=$INC
    if [ -z "$FILE" ] || [ -z "$INC" ]; then
        while IFS=$'\t' read -r py d; do
            [ -n "$d" ] || continue
            if [ -z "$FILE" ]; then
                for sub in "$d"/*/lib; do
                    if f=$(lib_in "$sub" "$name"); then WHERE=$py FILE=$f; break; fi
                done
            fi
            if [ -z "$INC" ]; then
                for sub in "$d"/*/include; do
                    if [ -e "$sub/$h" ] && ! banned "$sub"; then INC=$sub; break; fi
                done
            fi
            [ -n "$FILE" ] && [ -n "$INC" ] && break
        done < <(site_nvidia_dirs)
    fi
    SYS_INC=$sys_inc
    [ -n "$FILE" ]
}

cmd=${1:-}
shift || true
case "$cmd" in
    find)
        [ $# -gt 0 ] || die "find: name at least one library"
        rc=0
        for lib in "$@"; do
            if locate "$lib"; then
                printf '%s\t%s\t%s\t%s\n' "$lib" "$WHERE" "$FILE" "${INC:-(no $(header_of "$lib") found)}"
            else
                printf '%s\t%s\t%s\t%s\n' "$lib" missing "-" "${INC:--}"
                rc=1
            fi
        done
        exit $rc ;;
    has)
        [ $# -eq 1 ] || die "has: name one library"
        locate "$1" ;;
    cflags)
        out=()
        for lib in "$@"; do
            locate "$lib" >/dev/null || true
            if [ -n "$INC" ] && [ -z "$SYS_INC" ]; then
                case " ${out[*]-} " in *" $INC "*) ;; *) out+=(-isystem "$INC") ;; esac
            fi
        done
        echo "${out[*]-}" ;;
    ldflags)
        [ $# -ge 1 ] || die "ldflags: name the folder for the unversioned links"
        dir=$1  # made, and made absolute, when a link is needed
        shift
        out=() rp=()
        for lib in "$@"; do
            if ! locate "$lib"; then
                echo "note: lib$lib not found in the CUDA toolkit, ldconfig's cache or a Python's nvidia/*/lib" >&2
                continue
            fi
            [ "$WHERE" = toolkit ] && continue
            if [ ${#out[@]} -eq 0 ]; then
                if ! mkdir -p "$dir" || ! dir=$(cd "$dir" && pwd); then die "cannot create $dir"; fi
            fi
            ln -sfn "$FILE" "$dir/lib$lib.so" || die "cannot link $dir/lib$lib.so"
            [ ${#out[@]} -eq 0 ] && out+=("-L$dir")
            if [ "$WHERE" != ldconfig ]; then
                case " ${rp[*]-} " in *" $(dirname "$FILE") "*) ;; *) rp+=("$(dirname "$FILE")") ;; esac
            fi
        done
        for d in "${rp[@]+"${rp[@]}"}"; do out+=("-Xlinker" "-rpath,$d"); done
        # an old-style DT_RPATH: it also serves the libraries' own dlopen()s (cuDNN opens its
        # sub-libraries, NVRTC its builtins), where a DT_RUNPATH would serve the binary's needs only
        [ ${#rp[@]} -gt 0 ] && out+=("-Xlinker" "--disable-new-dtags")
        echo "${out[*]-}" ;;
    ldpath)
        dirs=()
        for lib in "$@"; do
            locate "$lib" >/dev/null || continue
            [ "$WHERE" = ldconfig ] && continue  # the loader knows these already
            d=$(dirname "$FILE")
            case " ${dirs[*]-} " in *" $d "*) ;; *) dirs+=("$d") ;; esac
        done
        IFS=: read -r -a inherited <<< "${LD_LIBRARY_PATH:-}"
        for d in "${inherited[@]+"${inherited[@]}"}"; do
            [ -n "$d" ] || continue
            if banned "$d"; then echo "note: $d left out of LD_LIBRARY_PATH (CUDA's compat or stubs folder)" >&2; continue; fi
            case " ${dirs[*]-} " in *" $d "*) ;; *) dirs+=("$d") ;; esac
        done
        (IFS=:; echo "${dirs[*]-}") ;;
    *)
        die "unknown command '${cmd}' (find, has, cflags, ldflags or ldpath)" ;;
esac
