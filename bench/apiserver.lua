-- wrk script for bench/apiserver.py: POST one Pod (metadata.generateName: every create is a new Pod) to the
-- API server with a bearer token; print a JSON summary line at the end, with the status of every answer
-- that was not 201 Created and the body of the last one.
-- env: BODY_FILE (the Pod as JSON), TOKEN (bearer token).
local f = assert(io.open(assert(os.getenv("BODY_FILE")), "rb"))
local body = f:read("*a")
f:close()

wrk.method = "POST"
wrk.body = body
wrk.headers["Content-Type"] = "application/json"
wrk.headers["Accept"] = "application/json"
wrk.headers["Authorization"] = "Bearer " .. assert(os.getenv("TOKEN"))

local threads = {}

function setup(thread)
  table.insert(threads, thread)
end

-- in each thread's state
statuses = ""
last_error = ""

function response(status, headers, resp_body)
  if status ~= 201 then
    statuses = statuses .. status .. " "
    last_error = resp_body
  end
end

local function json_string(s)
  return '"' .. s:gsub('[%c"\\]', function(c) return string.format("\\u%04x", c:byte()) end) .. '"'
end

function done(summary, latency, requests)
  local e = summary.errors
  local st, last = "", ""
  for _, t in ipairs(threads) do
    st = st .. (t:get("statuses") or "")
    local l = t:get("last_error") or ""
    if l ~= "" then last = l end
  end
  io.write(string.format(
    'WRKJSON {"requests":%d,"duration_us":%d,"bytes":%d,' ..
    '"err_connect":%d,"err_read":%d,"err_write":%d,"err_status":%d,"err_timeout":%d,' ..
    '"lat_mean_us":%.1f,"lat_p50_us":%d,"lat_p90_us":%d,"lat_p99_us":%d,"lat_p999_us":%d,"lat_max_us":%d,' ..
    '"bad_statuses":%s,"last_error":%s}\n',
    summary.requests, summary.duration, summary.bytes,
    e.connect, e.read, e.write, e.status, e.timeout,
    latency.mean, latency:percentile(50), latency:percentile(90), latency:percentile(99),
    latency:percentile(99.9), latency.max, json_string(st), json_string(last:sub(1, 300))))
end
