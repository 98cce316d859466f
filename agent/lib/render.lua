-- The example's "render farm": a local process that renders (sleeps), then
-- POSTs the outcome to the webhook URL with curl, retrying while the host is
-- down, as a real farm's callback would.
local files = require "lib.files"

local M = {}

function M.submit(project_id, callback_url, seconds)
  local job = "job-" .. project_id
  local body = ('{"status":"ok","url":"https://videos.example.internal/%s.mp4","job":"%s"}'):format(project_id, job)
  local cmd = ("(sleep %s; curl -s -o /dev/null --retry 60 --retry-connrefused --retry-delay 1 "
    .. "-X POST -H 'Content-Type: application/json' -d %s %s) >/dev/null 2>&1 &"):format(
    tostring(seconds), files.shell_quote(body), files.shell_quote(callback_url))
  files.run(cmd)
  return job
end

function M.abort(job)
  files.run("true") -- a real farm would be told to stop; the local one just finishes
  return job
end

return M
