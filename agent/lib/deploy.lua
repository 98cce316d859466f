-- The example's "deployment system": plans and applies write files under
-- .moor/deploys/, so a run's effects can be seen (and counted) on disk.
local files = require "lib.files"

local M = {}

local DIR = os.getenv("MOOR_DEPLOY_DIR") or ".moor/deploys"

local function witness(line)
  files.run("mkdir -p " .. files.shell_quote(DIR))
  local f = assert(io.open(DIR .. "/witness.log", "a"))
  f:write(line, "\n")
  f:close()
end

function M.plan(service)
  witness("plan " .. service)
  return { service = service, summary = ("1 service (%s), 3 replicas, rolling update"):format(service) }
end

function M.apply(plan)
  witness("apply " .. plan.service)
  local url = ("https://%s.example.internal"):format(plan.service)
  files.write(DIR .. "/" .. plan.service .. ".json", ('{"service":"%s","url":"%s"}\n'):format(plan.service, url))
  return url
end

function M.page_on_call(service)
  witness("page " .. service)
  return true
end

return M
