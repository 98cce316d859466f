-- Every Lua file of moor (lua/**/*.lua and the built-in tools/*.lua) is
-- installed by the rockspec under its module name (lua/moor/x/init.lua as
-- moor.x, lua/moor/x/y.lua as moor.x.y, tools/t.lua as moor.tools.t), and
-- every file the rockspec installs exists, so a module added to lua/ is not
-- missing from a stock Lua's install (`require "moor"` would fail there).
--   lua5.4 check_lua_modules.lua rockspec/moor-scm-1.rockspec <source dir>
local rockspec_path, root = arg[1], arg[2]

local f = assert(io.open(rockspec_path, "r"))
local text = f:read("a")
f:close()

local installed, by_path = {}, {}
for name, path in text:gmatch('%["([%w_.]+)"%]%s*=%s*"([^"]+%.lua)"') do
  installed[name], by_path[path] = path, name
end

local function module_of(path)
  local p = path:match("^lua/(.+)%.lua$")
  if p then return (p:gsub("/init$", ""):gsub("/", ".")) end
  local t = path:match("^tools/([%w_]+)%.lua$")
  if t then return "moor.tools." .. t end
end

local problems, n = {}, 0
local ls = io.popen(("cd '%s' && find lua tools -name '*.lua' | sort"):format(root))
for path in ls:lines() do
  n = n + 1
  local want = module_of(path)
  local got = by_path[path]
  if not got then
    problems[#problems + 1] = ("%s is not installed by %s (add [\"%s\"] = \"%s\")"):format(path, rockspec_path,
      want, path)
  elseif got ~= want then
    problems[#problems + 1] = ("%s is installed as %s, but require names it %s"):format(path, got, want)
  end
end
ls:close()
for name, path in pairs(installed) do
  local h = io.open(root .. "/" .. path, "r")
  if h then h:close() else problems[#problems + 1] = ("%s installs %s, which does not exist"):format(name, path) end
end

if #problems > 0 then
  table.sort(problems)
  io.stderr:write("the rockspec's Lua modules and the tree disagree:\n  ", table.concat(problems, "\n  "), "\n")
  os.exit(1)
end
print(("the rockspec installs every Lua file of the tree (%d files)"):format(n))
