#!/usr/bin/env bash
# airlock-netns.sh: run one command in a network namespace whose only way
# out is Airlock.
#
#   sudo examples/netns/airlock-netns.sh [-c CONFIG] [-u USER] [-s SUBNET] -- COMMAND [ARGS...]
#
# It creates a network namespace whose only interface is one end of a veth
# pair, starts Airlock (the binary in $AIRLOCK, else `airlock` on PATH) on
# the other end, in the namespace this script runs in, as the proxy and the
# DNS resolver, and runs COMMAND inside with the proxy variables, a
# resolv.conf naming Airlock and, when the policy intercepts TLS, a CA
# bundle. Inside there is no default route, and an nftables table drops
# every packet that is not for Airlock's two ports (so not even the host's
# other services are reachable). COMMAND runs as USER (default: $SUDO_USER;
# as root otherwise, who could undo the nftables table), in a session of
# its own without a controlling terminal: it cannot push keystrokes into
# the terminal the script was started from (TIOCSTI). Its standard input
# and output are still the script's, so line-oriented programs work; an
# interactive shell has no job control. INT, TERM and HUP are passed to
# COMMAND; everything is torn down when it exits (any process left in the
# namespace is killed), and its exit status is the script's. A SIGKILL of
# the script leaves the namespace, its veth and /etc/netns/NAME behind:
# remove them with `ip netns del NAME`.
#
# Only the network is confined: COMMAND shares the host's filesystem, so
# Unix sockets its user may open (docker.sock, D-Bus, a local resolver's
# socket) are reachable. Add file isolation for that (a container,
# bubblewrap).
#
# Needs root, ip (iproute2), nft (nftables) and setpriv (util-linux).
#   -c CONFIG   Airlock policy file (default: the embedded default policy)
#   -u USER     user to run COMMAND as
#   -s SUBNET   the veth's /30, as A.B.C.0 (default 10.199.199.0): the host
#               end is .1, the namespace end .2
#   -n NAME     namespace name (default airlock-PID)
#   -a FILE     append Airlock's audit log to FILE (default: standard error)
set -euo pipefail

config="" user="${SUDO_USER:-}" subnet="10.199.199.0" name="airlock-$$" audit=/dev/stderr
while getopts "c:u:s:n:a:h" opt; do
  case "$opt" in
    c) config="$OPTARG" ;;
    u) user="$OPTARG" ;;
    s) subnet="$OPTARG" ;;
    n) name="$OPTARG" ;;
    a) audit="$OPTARG" ;;
    *) sed -n '2,38p' "$0" >&2; exit 2 ;;
  esac
done
shift $((OPTIND - 1))
[ "${1:-}" = "--" ] && shift
if [ $# -eq 0 ]; then
  echo "airlock-netns: give a command: $0 [-c CONFIG] -- COMMAND [ARGS...]" >&2
  exit 2
fi
if [ "$(id -u)" -ne 0 ]; then
  echo "airlock-netns: needs root (network namespaces and nftables): run it with sudo" >&2
  exit 2
fi
for tool in ip nft setpriv; do
  command -v "$tool" >/dev/null || { echo "airlock-netns: $tool not found (install iproute2, nftables, util-linux)" >&2; exit 2; }
done
airlock="${AIRLOCK:-$(command -v airlock || true)}"
[ -x "$airlock" ] || { echo "airlock-netns: no airlock binary: put it on PATH or set AIRLOCK=/path/to/airlock" >&2; exit 2; }
case "$subnet" in
  *.0) base="${subnet%.0}" ;;
  *) echo "airlock-netns: -s $subnet: give the /30's first address, as 10.199.199.0" >&2; exit 2 ;;
esac
host_ip="$base.1" ns_ip="$base.2"
if ip netns list | awk '{print $1}' | grep -qx -- "$name"; then
  echo "airlock-netns: a network namespace named $name exists already; give another -n NAME" >&2
  exit 2
fi
host_if="alh${$}" ns_if="als${$}"   # interface names are at most 15 bytes
work="$(mktemp -d /tmp/airlock-netns.XXXXXX)"
airlock_pid="" cmd_pid="" created=""

cleanup() {
  set +e
  if [ -n "$created" ]; then
    # Whatever COMMAND left running in the namespace goes with it.
    ip netns pids "$name" 2>/dev/null | xargs -r kill -KILL 2>/dev/null
  fi
  [ -n "$airlock_pid" ] && kill "$airlock_pid" 2>/dev/null && wait "$airlock_pid" 2>/dev/null
  if [ -n "$created" ]; then
    ip netns del "$name" 2>/dev/null    # takes the veth pair with it
    ip link del "$host_if" 2>/dev/null
    rm -rf "/etc/netns/$name"
  fi
  rm -rf "$work"
}
trap cleanup EXIT
# INT, TERM and HUP go to COMMAND's session, and the script then waits
# for it; before COMMAND runs, they end the script (after cleanup).
forward() {
  if [ -n "$cmd_pid" ]; then
    kill "-$1" -- "-$cmd_pid" 2>/dev/null
  else
    exit "$2"
  fi
}
trap 'forward INT 130' INT
trap 'forward TERM 143' TERM
trap 'forward HUP 129' HUP

ip netns add "$name"
created=1
ip link add "$host_if" type veth peer name "$ns_if" netns "$name"
ip addr add "$host_ip/30" dev "$host_if"
ip link set "$host_if" up
ip -n "$name" link set lo up
ip -n "$name" addr add "$ns_ip/30" dev "$ns_if"
ip -n "$name" link set "$ns_if" up
# No default route: the /30 is all the namespace knows. And in case a
# route ever appears, only Airlock's ports may be reached.
ip netns exec "$name" nft -f - <<NFT
table inet airlock {
  chain output {
    type filter hook output priority 0; policy drop;
    oifname "lo" accept
    ip daddr $host_ip tcp dport 3128 accept
    ip daddr $host_ip udp dport 53 accept
    ip daddr $host_ip tcp dport 53 accept
    meta l4proto tcp reject with tcp reset
    reject
  }
}
NFT

mkdir -p "/etc/netns/$name"
printf 'nameserver %s\noptions ndots:1\n' "$host_ip" > "/etc/netns/$name/resolv.conf"

args=(run --listen "$host_ip:3128" --dns "$host_ip:53" --state-dir "$work/state")
[ -n "$config" ] && args+=(--config "$config")
# Airlock's operational messages go to stderr, its audit log to $audit.
"$airlock" "${args[@]}" >>"$audit" &
airlock_pid=$!
for _ in $(seq 100); do
  if (exec 3<>"/dev/tcp/$host_ip/3128") 2>/dev/null; then break; fi
  kill -0 "$airlock_pid" 2>/dev/null || { echo "airlock-netns: airlock exited" >&2; exit 1; }
  sleep 0.1
done

# The sandbox's environment: what `airlock env` prints, with the CA bundle
# copied where COMMAND's user can read it (the CA key stays in $work/state).
env_args=()
while IFS= read -r line; do
  [[ "$line" == export\ * ]] || continue
  kv="${line#export }" k="${kv%%=*}" v="${kv#*=}"
  v="${v#\'}" v="${v%\'}"
  env_args+=("$k=$v")
done < <("$airlock" env --proxy "$host_ip:3128" --state-dir "$work/state" ${config:+--config "$config"} --ca-path "$work/ca-bundle.pem" 2>/dev/null)
[ -f "$work/state/ca-bundle.pem" ] && install -m 0644 "$work/state/ca-bundle.pem" "$work/ca-bundle.pem"
chmod 0755 "$work"
chmod 0700 "$work/state" 2>/dev/null || true

# setsid: a new session without a controlling terminal (no TIOCSTI into
# the caller's terminal), whose process group gets the forwarded signals.
run=(ip netns exec "$name" setsid --wait)
uid=""
[ -n "$user" ] && uid="$(id -u "$user")"
if [ -n "$uid" ] && [ "$uid" != 0 ]; then
  run+=(setpriv --reuid="$uid" --regid="$(id -g "$user")" --init-groups --reset-env)
else
  echo "airlock-netns: warning: COMMAND runs as root, which can remove the namespace's nftables table; give -u USER" >&2
fi
set +e
"${run[@]}" env "${env_args[@]}" "$@" <&0 &   # <&0: a background job would get /dev/null
cmd_pid=$!
# wait returns early when a trapped signal arrives: wait again until
# COMMAND has really exited.
while :; do
  wait "$cmd_pid"
  status=$?
  kill -0 "$cmd_pid" 2>/dev/null || break
done
exit "$status"
