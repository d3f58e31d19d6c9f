-- wrk script: POST AdmissionReviews taken in turn from BODIES_FILE (one compact JSON document per line),
-- so consecutive requests carry different objects; prints the same WRKJSON summary as reference/admission.lua.
-- Every "__SEQ__" in a body is replaced by the request's sequence number, so no two requests are alike even
-- after the rotation wraps (bench/engine.py puts it in each container's image tag).
local path = assert(os.getenv("BODIES_FILE"), "BODIES_FILE is required")
local bodies = {}
for line in io.lines(path) do
  if #line > 0 then bodies[#bodies + 1] = line end
end
assert(#bodies > 0, "no bodies in " .. path)
local i = 0
local seq = 0
local headers = {["Content-Type"] = "application/json", ["Accept"] = "application/json, */*"}

request = function()
  i = i % #bodies + 1
  seq = seq + 1
  return wrk.format("POST", nil, headers, (string.gsub(bodies[i], "__SEQ__", tostring(seq))))
end

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
