-- A background tool (defineTool with execution = "background"): each call
-- runs as a task, in one step, while the conversation goes on. Its yields
-- are progress (stream only), and `coroutine.yield(task.postMessage(...))`
-- wakes the parent session with a message attributed to the task. It has no
-- ctx.ask: a background tool cannot wait for a person.
local moor = require "moor"
local files = require "lib.files"
local s = moor.schema

return moor.defineTool {
  execution = "background",
  description = "Find TODO and FIXME markers in the Lua files under a folder, in the background. Posts a "
    .. "message as soon as it finds the first ones.",
  inputSchema = s.object { path = s.string { minLength = 1, description = "the folder to scan" } },
  execute = function(input, _, task)
    local found = moor.json.array {}
    local list = files.line_counts(input.path)
    for i, f in ipairs(list) do
      coroutine.yield { scanned = i, of = #list } -- progress
      local n = 0
      for line in io.lines(f.path) do
        n = n + 1
        local mark = line:match("%-%-%s*(TODO.*)") or line:match("%-%-%s*(FIXME.*)")
        if mark then
          found[#found + 1] = ("%s:%d: %s"):format(f.path, n, mark)
          if #found == 1 then
            coroutine.yield(task.postMessage(("The first marker is in %s (line %d); still scanning."):format(
              f.path, n)))
          end
        end
      end
    end
    return { files = #list, markers = found }
  end,
}
