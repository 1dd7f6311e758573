-- wrk script: POST a unique entry per request to <url> (/add, or /append with
-- WRK_BODY=append for {"leaf": ...} bodies). The counter is per thread, made unique
-- across threads and runs by the thread id and the start time.
local counter = 0
local prefix = ""
local append_json = os.getenv("WRK_BODY") == "append"

function setup(thread)
  thread:set("tid", tostring(thread))
end

function init(args)
  prefix = string.format("%s-%d-%s", tostring(tid or ""), os.time(), tostring(math.random(1, 1e9)))
  wrk.method = "POST"
end

function request()
  counter = counter + 1
  local entry = string.format("svc race leaf %s %d", prefix, counter)
  if append_json then
    wrk.headers["Content-Type"] = "application/json"
    return wrk.format(nil, nil, nil, '{"leaf":"' .. entry .. '"}')
  end
  return wrk.format(nil, nil, nil, entry)
end

function done(summary, latency, requests)
  io.write(string.format("RESULT requests=%d duration_us=%d errors=%d p50_us=%d p99_us=%d\n",
    summary.requests, summary.duration,
    summary.errors.connect + summary.errors.read + summary.errors.write + summary.errors.status + summary.errors.timeout,
    latency:percentile(50), latency:percentile(99)))
end
