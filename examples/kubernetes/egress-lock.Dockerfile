# The sidecar example's init container: iptables and ip6tables, nothing
# else. Build it once and push it where your cluster pulls from, so that
# nothing is installed while a Pod starts:
#   docker build -t egress-lock:latest -f egress-lock.Dockerfile .
FROM alpine:3.20
RUN apk add --no-cache iptables ip6tables
