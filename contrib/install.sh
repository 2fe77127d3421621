#!/usr/bin/env bash
# Installs wfhost and wfhost-child (both are needed: wfhost-child hosts
# plain commands and the demo workflow, and is looked up beside wfhost),
# their manual pages and the shell completions, under one prefix.
#
#   contrib/install.sh                         # build release binaries, install under /usr/local
#   contrib/install.sh --prefix ~/.local       # or anywhere else
#   contrib/install.sh --bin-dir target/release  # install binaries built already
#
# Installs PREFIX/bin/{wfhost,wfhost-child}, PREFIX/share/man/man1/*.1 and
# completions for bash, zsh and fish under PREFIX/share.
set -euo pipefail
cd "$(dirname "$0")/.."

prefix=/usr/local
bin_dir=
while [ $# -gt 0 ]; do
  case "$1" in
    --prefix) prefix=${2:?--prefix needs a directory}; shift 2 ;;
    --bin-dir) bin_dir=${2:?--bin-dir needs a directory}; shift 2 ;;
    -h|--help) sed -n '2,12p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
    *) echo "install.sh: unknown argument $1 (try --help)" >&2; exit 2 ;;
  esac
done

if [ -z "$bin_dir" ]; then
  cargo build --release --locked -p wfhost -p wfhost-child
  bin_dir=target/release
fi
for b in wfhost wfhost-child; do
  if [ ! -x "$bin_dir/$b" ]; then
    echo "install.sh: $bin_dir/$b is missing; build it (cargo build --release -p wfhost -p wfhost-child) or drop --bin-dir" >&2
    exit 1
  fi
done

man="$prefix/share/man/man1"
bash_dir="$prefix/share/bash-completion/completions"
zsh_dir="$prefix/share/zsh/site-functions"
fish_dir="$prefix/share/fish/vendor_completions.d"
install -d "$prefix/bin" "$man" "$bash_dir" "$zsh_dir" "$fish_dir"
install -m 0755 "$bin_dir/wfhost" "$bin_dir/wfhost-child" "$prefix/bin/"
"$prefix/bin/wfhost" man "$man" >/dev/null
"$prefix/bin/wfhost-child" man "$man" >/dev/null
"$prefix/bin/wfhost" completions bash > "$bash_dir/wfhost"
"$prefix/bin/wfhost" completions zsh > "$zsh_dir/_wfhost"
"$prefix/bin/wfhost" completions fish > "$fish_dir/wfhost.fish"

echo "installed wfhost and wfhost-child in $prefix/bin"
echo "  manual pages in $man (man wfhost, man wfhost-status, man wfhost-child-exec)"
echo "  completions for bash, zsh and fish under $prefix/share (open a new shell)"
case ":$PATH:" in
  *":$prefix/bin:"*) ;;
  *) echo "  note: $prefix/bin is not on PATH; add it, e.g. export PATH=\"$prefix/bin:\$PATH\"" ;;
esac
"$prefix/bin/wfhost" --version
