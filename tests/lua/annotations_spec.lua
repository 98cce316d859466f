-- The LuaLS annotations (lua/moor/meta/, issue 14 item 3) cover the whole
-- public authoring API and stay true to it: every public name of `moor`,
-- moor.testing, moor.schema, moor.json and of both kinds of ctx (read from
-- the real modules and a real run's ctx) is annotated, the definition files
-- are valid Lua that name the class of each method, and every ---@param
-- names a parameter of the function it documents.
local moor = require "moor"
local t = moor.testing
local s = moor.schema

local META = package.searchpath("moor.scaffold", package.path):match("^(.*)/[^/]*$") .. "/meta"
local FILES = { "moor.lua", "schema.lua", "testing.lua" }

local function read(path)
  local f = assert(io.open(path, "r"))
  local text = f:read("a")
  f:close()
  return text
end

-- classes[name] = { fields = { key = true }, parents = { ... } }, and problems
-- found on the way (a ---@param that names no parameter).
local function parse()
  local classes, problems = {}, {}
  for _, file in ipairs(FILES) do
    local path = META .. "/" .. file
    local text = read(path)
    assert(load(text, "@" .. path, "t"), path .. " is not valid Lua")
    assert(text:match("^%-%-%-@meta [%w.]+\n"), path .. " does not start with ---@meta NAME")
    local cur, vars, params = nil, {}, {}
    local n = 0
    for line in (text .. "\n"):gmatch("(.-)\n") do
      n = n + 1
      local cname, rest = line:match("^%-%-%-@class ([%w_.]+)(.*)$")
      if cname then
        cur = { fields = {}, parents = { rest:match("^:%s*([%w_.]+)") } }
        classes[cname] = cur
      end
      local field = line:match("^%-%-%-@field ([%w_]+)%??%s")
      if field and cur then cur.fields[field] = true end
      local var = line:match("^local ([%w_]+) = {}")
      if var then vars[var] = cur end
      local p = line:match("^%-%-%-@param ([%w_.]+)%??%s")
      if p then params[#params + 1] = p end
      local obj, method, args = line:match("^function ([%w_]+)[.:]([%w_]+)%((.-)%)")
      if obj then
        local class = vars[obj]
        if not class then
          problems[#problems + 1] = ("%s:%d: %s has no ---@class before its `local %s = {}`"):format(file, n, obj, obj)
        else
          class.fields[method] = true
        end
        local have = {}
        for a in args:gmatch("[%w_.]+") do have[a] = true end
        for _, name in ipairs(params) do
          if not have[name] then
            problems[#problems + 1] = ("%s:%d: ---@param %s names no parameter of %s.%s(%s)"):format(file, n, name,
              obj, method, args)
          end
        end
      end
      if not line:match("^%-%-%-") then params = {} end
    end
  end
  return classes, problems
end

local classes, problems = parse()

local function annotated(class, key, seen)
  local c = classes[class]
  if not c then return false end
  if c.fields[key] then return true end
  seen = seen or {}
  if seen[class] then return false end
  seen[class] = true
  for _, p in ipairs(c.parents) do
    if annotated(p, key, seen) then return true end
  end
  return false
end

local function missing(class, keys)
  local out = {}
  for _, k in ipairs(keys) do
    if type(k) == "string" and k:sub(1, 1) ~= "_" and not annotated(class, k) then out[#out + 1] = k end
  end
  table.sort(out)
  return out
end

local function keys_of(tbl)
  local out = {}
  for k in pairs(tbl) do out[#out + 1] = k end
  table.sort(out)
  return out
end

describe("the LuaLS annotations (lua/moor/meta/)", function()
  it("are valid definition files whose ---@param lines name real parameters", function()
    assert.are.same({}, problems)
    assert.truthy(classes["moor"] and classes["moor.testing"] and classes["moor.schema"])
  end)

  it("annotate every public name of moor, moor.testing, moor.schema and moor.json", function()
    assert.are.same({}, missing("moor", keys_of(moor)))
    assert.are.same({}, missing("moor.testing", keys_of(moor.testing)))
    assert.are.same({}, missing("moor.schema", keys_of(moor.schema)))
    assert.are.same({}, missing("moor.json", keys_of(moor.json)))
  end)

  it("annotate every field of a plain tool's ctx and of a workflow body's ctx", function()
    local plain = t.call(moor.defineTool {
      description = "Its ctx's keys.",
      inputSchema = s.object {},
      execute = function(_, ctx) return keys_of(ctx) end,
    })
    local workflow = t.call(moor.defineWorkflowTool {
      description = "Its ctx's keys.",
      inputSchema = s.object {},
      execute = function(_, ctx) return keys_of(ctx) end,
    })
    assert.truthy(#plain >= 4 and #workflow > #plain)
    assert.are.same({}, missing("moor.PlainCtx", plain))
    assert.are.same({}, missing("moor.WorkflowCtx", workflow))
  end)

  it("can fail: a name the annotations lack is reported", function()
    assert.are.same({ "noSuchApi" }, missing("moor", { "step", "noSuchApi", "_private" }))
  end)
end)
