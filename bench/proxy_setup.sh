# Shared by the bench scripts (sourced, with $work set): the
# fast upstream (an nginx answering every POST with a fixed chat completion), an nginx proxying
# to it with upstream keepalive, and wrk scripts POSTing the two bodies (a small chat request and
# the captured 86 KB Claude Code turn) with Claude Code's session header over 64 sessions.

free_port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }

# $work/up/nginx.conf: the upstream on port $1.
write_upstream_conf() {
  local UP=$1
  mkdir -p "$work/up"
  cat > "$work/up/nginx.conf" <<CONF
worker_processes 1;
daemon off;
pid $work/up/nginx.pid;
error_log $work/up/error.log;
events { worker_connections 4096; }
http {
  access_log off;
  client_body_buffer_size 256k;
  keepalive_requests 1000000;
  server {
    listen 127.0.0.1:$UP;
    location /health { return 200 "ok"; }
    location /metrics { default_type text/plain; return 200 "# no metrics\n"; }
    location / {
      default_type application/json;
      return 200 '{"id":"x","object":"chat.completion","choices":[{"index":0,"message":{"role":"assistant","content":"ok"},"finish_reason":"stop"}],"usage":{"prompt_tokens":10,"completion_tokens":1,"total_tokens":11,"prompt_tokens_details":{"cached_tokens":0}}}';
    }
  }
}
CONF
}

# $work/ngx/nginx.conf: the proxy on port $1 in front of port $2, with $3 workers ("single": one
# process and no master, for a profiler); over TLS when $PROXY_TLS_CERT and $PROXY_TLS_KEY are set.
write_proxy_conf() {
  local NGX=$1 UP=$2 WORKERS=$3 MASTER=""
  [[ $WORKERS == single ]] && { MASTER="master_process off;"; WORKERS=1; }
  mkdir -p "$work/ngx"
  cat > "$work/ngx/nginx.conf" <<CONF
$MASTER
worker_processes $WORKERS;
daemon off;
pid $work/ngx/nginx.pid;
error_log $work/ngx/error.log;
events { worker_connections 4096; }
http {
  access_log off;
  client_max_body_size 32m;
  client_body_buffer_size 256k;
  keepalive_requests 1000000;
  upstream replicas { server 127.0.0.1:$UP; keepalive 64; }
  server {
    listen 127.0.0.1:$NGX${PROXY_TLS_CERT:+ ssl};
    ${PROXY_TLS_CERT:+ssl_certificate $PROXY_TLS_CERT; ssl_certificate_key $PROXY_TLS_KEY;}
    location / {
      proxy_pass http://replicas;
      proxy_http_version 1.1;
      proxy_set_header Connection "";
      proxy_buffering off;
    }
  }
}
CONF
}

# $work/small.lua and $work/claude.lua.
write_wrk_scripts() {
  python3 - "$work" <<'PY'
import json, sys
work = sys.argv[1]
small = {"model": "m", "max_tokens": 16, "messages": [{"role": "user", "content": "hello there"}]}
turn = json.load(open("tests/fixtures/claude-code-turn1.json"))["body"]
turn["model"] = "m"
for name, body in (("small", small), ("claude", turn)):
    s = json.dumps(body, separators=(",", ":"))
    lua = 'wrk.method = "POST"\nwrk.headers["Content-Type"] = "application/json"\nwrk.body = [==[' + s + ']==]\n'
    lua += 'local n = 0\nrequest = function()\n  n = n + 1\n'
    lua += '  wrk.headers["X-Claude-Code-Session-Id"] = "bench-" .. (n % 64)\n'
    lua += '  return wrk.format(nil, "/v1/chat/completions")\nend\n'
    open(f"{work}/{name}.lua", "w").write(lua)
PY
}

# $work/stream.lua: each request the opening turn of one of $1 conversations (its session id and
# its text), a stream of 256 tokens; and $work/events: the data: lines of one such stream from the
# upstream at port $2.
write_stream_script() {
  local CONVERSATIONS=$1 UPSTREAM=$2
  cat > "$work/stream.lua" <<LUA
local n = 0
request = function()
  n = n + 1
  local id = n % $CONVERSATIONS
  wrk.headers["Content-Type"] = "application/json"
  wrk.headers["X-Session-ID"] = "stream-" .. id
  local body = '{"model":"m","stream":true,"max_tokens":256,"messages":[{"role":"user","content":"conversation ' .. id .. ': say something long"}]}'
  return wrk.format("POST", "/v1/chat/completions", nil, body)
end
LUA
  curl -sN -i "http://127.0.0.1:$UPSTREAM/v1/chat/completions" -H 'Content-Type: application/json' \
    -d '{"model":"m","stream":true,"max_tokens":256,"messages":[{"role":"user","content":"count the events"}]}' \
    > "$work/one-stream.txt"
  grep -c '^data: ' "$work/one-stream.txt" > "$work/events"
}
