-- wrk script for bench/apiserver.py: POST one Pod (metadata.generateName: every create is a new Pod) to the
-- API server with a bearer token; print a JSON summary line at the end.
-- env: BODY_FILE (the Pod as JSON), TOKEN (bearer token).
local f = assert(io.open(assert(os.getenv("BODY_FILE")), "rb"))
local body = f:read("*a")
f:close()

wrk.method = "POST"
wrk.body = body
wrk.headers["Content-Type"] = "application/json"
wrk.headers["Accept"] = "application/json"
wrk.headers["Authorization"] = "Bearer " .. assert(os.getenv("TOKEN"))

function done(summary, latency, requests)
  local e = summary.errors
  io.write(string.format(
    'WRKJSON {"requests":%d,"duration_us":%d,"bytes":%d,' ..
    '"err_connect":%d,"err_read":%d,"err_write":%d,"err_status":%d,"err_timeout":%d,' ..
    '"lat_mean_us":%.1f,"lat_p50_us":%d,"lat_p90_us":%d,"lat_p99_us":%d,"lat_p999_us":%d,"lat_max_us":%d}\n',
    summary.requests, summary.duration, summary.bytes,
    e.connect, e.read, e.write, e.status, e.timeout,
    latency.mean, latency:percentile(50), latency:percentile(90), latency:percentile(99),
    latency:percentile(99.9), latency.max))
end
