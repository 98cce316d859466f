-- No import circle between the host's C files: file A depends on file B
-- when A's object uses a symbol B's object defines (nm). The graph must be
-- acyclic (host/host.h draws it). Prints the graph; fails naming a cycle.
--   lua5.4 check_cycles.lua a.c.o b.c.o ...
local defs, uses, names = {}, {}, {}
for i = 1, #arg do
  local path = arg[i]
  local name = path:match("([^/]+)%.c%.o$") or path:match("([^/]+)%.o$") or path
  names[#names + 1] = name
  defs[name], uses[name] = {}, {}
  local nm = assert(io.popen("nm " .. path))
  for line in nm:lines() do
    local kind, sym = line:match("^%x+ (%a) (%S+)$")
    if kind and kind:match("[TDRBC]") then defs[name][sym] = true end
    local usym = line:match("^%s+U (%S+)$")
    if usym then uses[name][usym] = true end
  end
  assert(nm:close(), "nm failed on " .. path)
end
if #names == 0 then error("no object files given", 0) end
table.sort(names)

local deps = {}
for _, a in ipairs(names) do
  deps[a] = {}
  for _, b in ipairs(names) do
    if a ~= b then
      for sym in pairs(uses[a]) do
        if defs[b][sym] then deps[a][#deps[a] + 1] = b break end
      end
    end
  end
  if #deps[a] > 0 then print(("%s -> %s"):format(a, table.concat(deps[a], " "))) end
end

local state, cycle = {}, nil
local function visit(v, path)
  state[v] = "open"
  path[#path + 1] = v
  for _, w in ipairs(deps[v]) do
    if cycle then return end
    if state[w] == "open" then
      local from
      for i, p in ipairs(path) do if p == w then from = i end end
      cycle = table.concat(path, " -> ", from) .. " -> " .. w
      return
    elseif not state[w] then
      visit(w, path)
    end
  end
  path[#path] = nil
  state[v] = "done"
end
for _, v in ipairs(names) do
  if not state[v] and not cycle then visit(v, {}) end
end
if cycle then
  io.stderr:write("import circle between C files: ", cycle, "\n")
  os.exit(1)
end
print(("no import circle between %d C files"):format(#names))
