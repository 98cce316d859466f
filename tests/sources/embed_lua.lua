-- Writes a Lua file as a C string literal (one quoted line per line), for
-- host/sandbox_prelude.h, which host/sandbox.c #includes:
--   lua5.4 tests/sources/embed_lua.lua host/sandbox_prelude.lua > host/sandbox_prelude.h
-- With a second argument, checks that file holds exactly that output instead
-- (ctest sandbox_prelude_embedded), so the header never drifts from the Lua.
local src_path, check_path = arg[1], arg[2]

local function read(path)
  local f = assert(io.open(path, "rb"))
  local text = f:read("a")
  f:close()
  return text
end

local out = { ("/* Generated from %s by tests/sources/embed_lua.lua: edit the Lua, then regenerate. */\n")
  :format(src_path:match("[^/]+$")) }
for line in read(src_path):gmatch("([^\n]*)\n") do
  local q = line:gsub("[\\\"]", "\\%0"):gsub("%?%?", "?\\?")
  out[#out + 1] = ('"%s\\n"\n'):format(q)
end
local text = table.concat(out)

if check_path then
  if read(check_path) ~= text then
    io.stderr:write(("%s is not %s embedded: run lua5.4 tests/sources/embed_lua.lua %s > %s\n")
      :format(check_path, src_path, src_path, check_path))
    os.exit(1)
  end
  print(check_path .. " matches " .. src_path)
else
  io.write(text)
end
