-- The C sources of moor.core, listed twice: CMakeLists.txt (MOOR_SOURCES,
-- the primary build) and the rockspec (moor.core's sources, a stock Lua's
-- build). They must name the same files, and every host/*.c but the CLI's
-- main.c and the launcher's wfa.c (moor-wfa, its own program) must be in
-- them, so a file added to one build is not missing from the other. Reads
-- the lists; names no file itself but those two programs.
--   lua5.4 check_sources.lua CMakeLists.txt rockspec/moor-scm-1.rockspec host
local cmake_path, rockspec_path, host_dir = arg[1], arg[2], arg[3]

local function read(path)
  local f, err = io.open(path, "r")
  if not f then error(("cannot read %s: %s"):format(path, err), 0) end
  local text = f:read("a")
  f:close()
  return text
end

local function set_of(text, what, path)
  local files, n = {}, 0
  for name in text:gmatch("host/[%w_%-]+%.c") do
    if not files[name] then files[name], n = true, n + 1 end
  end
  if n == 0 then error(("%s: no host/*.c files in %s"):format(path, what), 0) end
  return files
end

local cmake_text = read(cmake_path)
local cmake_list = cmake_text:match("set%(MOOR_SOURCES(.-)%)")
if not cmake_list then error(cmake_path .. ": no set(MOOR_SOURCES ...)", 0) end
local cmake = set_of(cmake_list, "set(MOOR_SOURCES ...)", cmake_path)

local rock_text = read(rockspec_path)
local core = rock_text:match('%["moor%.core"%]%s*=%s*(%b{})')
local rock_list = core and core:match("sources%s*=%s*(%b{})")
if not rock_list then error(rockspec_path .. ': no ["moor.core"] = { sources = { ... } }', 0) end
local rock = set_of(rock_list, 'moor.core\'s sources', rockspec_path)

local problems = {}
local function missing(from, to, to_name)
  local names = {}
  for name in pairs(from) do
    if not to[name] then names[#names + 1] = name end
  end
  table.sort(names)
  for _, name in ipairs(names) do problems[#problems + 1] = ("%s is not in %s"):format(name, to_name) end
end
missing(cmake, rock, rockspec_path)
missing(rock, cmake, cmake_path .. " (MOOR_SOURCES)")

if host_dir then
  local ls = io.popen(("ls %s/*.c"):format(host_dir))
  local on_disk = {}
  for line in ls:lines() do
    local name = "host/" .. line:match("([^/]+)$")
    if name ~= "host/main.c" and name ~= "host/wfa.c" then on_disk[name] = true end
  end
  ls:close()
  missing(on_disk, cmake, cmake_path .. " (MOOR_SOURCES)")
  missing(on_disk, rock, rockspec_path)
end

if #problems > 0 then
  io.stderr:write("the C source lists disagree:\n  ", table.concat(problems, "\n  "),
    "\nadd each file to both lists (CMakeLists.txt MOOR_SOURCES and the rockspec's moor.core sources)\n")
  os.exit(1)
end
local n = 0
for _ in pairs(cmake) do n = n + 1 end
print(("the CMake and rockspec source lists agree (%d files)"):format(n))
