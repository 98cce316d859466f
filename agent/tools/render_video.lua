-- Seed 000's render_video: hand the work to an external system and park on a
-- webhook until it calls back. Nothing runs in between; a cancel aborts the
-- job in a cleanup step.
local moor = require "moor"
local render = require "lib.render"
local s = moor.schema

local submitRender = moor.step("submitRender", function(projectId, url, seconds)
  return render.submit(projectId, url, seconds)
end)
local abortRender = moor.step("abortRender", function(job) return render.abort(job) end)

return moor.defineWorkflowTool {
  description = "Render a video. Returns the URL once the render farm finishes.",
  inputSchema = s.object {
    projectId = s.string { minLength = 1, pattern = "^[A-Za-z0-9_-]+$" },
    seconds = s.optional(s.integer { minimum = 0, maximum = 3600, description = "how long the render takes" }),
  },
  execute = function(input, ctx)
    local done = moor.createWebhook()
    local jobId = submitRender(input.projectId, done.url, input.seconds or 2)
    coroutine.yield { status = "rendering", job = jobId }
    local ok, callback = pcall(done.await, done)
    if not ok then
      if ctx.abortSignal.aborted then abortRender(jobId) end
      error(callback, 0)
    end
    local result = callback:json()
    if result.status ~= "ok" then error(moor.FatalError(("Render %s failed: %s"):format(jobId, result.status))) end
    return { url = result.url, job = jobId }
  end,
}
