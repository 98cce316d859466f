-- wrk script for `make bench`: POST a small JSON body to the webhook paths
-- listed (one a line) in the file given after `--`, round robin.
local paths = {}
local i = 0

function init(args)
  for line in io.lines(args[1]) do paths[#paths + 1] = line end
end

function request()
  i = i % #paths + 1
  return wrk.format("POST", paths[i], { ["Content-Type"] = "application/json" }, '{"status":"ok"}')
end
