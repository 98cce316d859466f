--- `moor test`: run busted inside the host, so specs can require "moor" and
-- call tools and steps on the real engine.
local M = {}

-- os.exit is swapped for the duration of the run.
-- luacheck: ignore 122

function M.run(args)
  local argv = {}
  for i, a in ipairs(args) do argv[i] = a end
  if #argv == 0 then argv[1] = "tests/lua" end
  -- busted reads the global `arg`; its runner calls os.exit, which we turn
  -- into a return so the host closes cleanly.
  _G.arg = argv
  argv[0] = "moor test"
  local exit_code
  local EXIT = {}
  local os_exit = os.exit
  os.exit = function(code)
    exit_code = (code == true or code == nil) and 0 or (code == false and 1 or code)
    error(EXIT, 0)
  end
  local has_pattern = false
  for _, a in ipairs(argv) do
    if a:match("^%-p") or a:match("^%-%-pattern") then has_pattern = true end
  end
  if not has_pattern then table.insert(argv, 1, "--pattern=_spec") end
  local ok, err = pcall(function()
    -- required here: busted is needed (and present) only when specs run
    require("busted.runner")({ standalone = false })
  end)
  os.exit = os_exit
  if not ok and err ~= EXIT then
    io.stderr:write("moor test: ", tostring(err), "\n")
    return 2
  end
  return exit_code or 0
end

return M
