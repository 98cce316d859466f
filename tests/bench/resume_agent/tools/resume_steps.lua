-- Benchmark tool for tests/bench/resume.c: n trivial durable steps, then the
-- step `edge`. Its first attempt writes input.ready (the driver's signal to
-- kill -9 the process) and blocks opening the FIFO input.block for reading
-- (no CPU spent: the kill ends it there). The re-run after `moor resume`
-- finds input.ready written and records, in input.out, the monotonic clock
-- in microseconds (moor.core's mono: CLOCK_MONOTONIC, the driver's clock)
-- at the moment the first new step starts, then returns.
local moor = require "moor"
local core = require "moor.core"
local s = moor.schema

local inc = moor.step("inc", function(x) return x + 1 end)

local function write(path, text)
  local f = assert(io.open(path, "wb"))
  f:write(text)
  f:close()
end

local edge = moor.step("edge", function(paths)
  local started = core.mono()
  local f = io.open(paths.ready, "rb")
  if f then -- the re-run after the kill: the first new step
    f:close()
    write(paths.out, ("%d\n"):format(started))
    return true
  end
  write(paths.ready, "ready\n")
  io.open(paths.block, "rb") -- blocks until a writer opens the FIFO: the kill comes first
  error("the FIFO " .. paths.block .. " was opened: the driver should have killed this process")
end)

return moor.defineWorkflowTool {
  description = "Benchmark: n trivial steps, then a step the driver kills the process in.",
  inputSchema = s.object {
    n = s.integer { minimum = 0 },
    ready = s.string(),
    block = s.string(),
    out = s.string(),
  },
  execute = function(input)
    local x = 0
    for _ = 1, input.n do x = inc(x) end
    edge { ready = input.ready, block = input.block, out = input.out }
    return x
  end,
}
