--- Loads an agent project: every tools/*.lua, and agent.lua when present,
-- with lib/ on the module path. Every broken file is reported at once, each
-- with its file and line; nothing runs when any file is broken.
local core = require "moor.core"
local moor = require "moor"
local session = require "moor.session"

local M = {}

local NAME_RULE = "a letter, then letters, digits, '_' or '-', at most 64 characters"

local function check_name(name)
  if #name > 64 or not name:match("^[A-Za-z][A-Za-z0-9_-]*$") then
    return ("bad tool name '%s': a tool's file name is its name: %s"):format(name, NAME_RULE)
  end
  if name:sub(1, 6) == "moor__" then
    return ("bad tool name '%s': names starting with moor__ are reserved for built-in tools"):format(name)
  end
end

local function read_file(path)
  local f, err = io.open(path, "rb")
  if not f then return nil, err end
  local s = f:read("a")
  f:close()
  return s
end

-- The line of the file's define call, for errors raised where the file's
-- own frame is gone (a tail call: `return moor.defineTool{...}`).
local function define_line(src)
  local n = 0
  for line in (src .. "\n"):gmatch("([^\n]*)\n") do
    n = n + 1
    if line:find("define%a*Tool%s*[{(]") or line:find("defineAgent%s*[{(]") then return n end
  end
  return 1
end

-- Turn whatever a chunk raised into "file:line: message".
local function describe(path, err, src)
  if type(err) == "table" then
    local where = err.where
    if not where or where:sub(1, #path) ~= path then where = path .. ":" .. define_line(src) end
    return where .. ": " .. tostring(err.message or err)
  end
  local s = tostring(err)
  if s:find(path, 1, true) == 1 then return s end
  return path .. ": " .. s
end

local function load_file(path)
  local src, rerr = read_file(path)
  if not src then return nil, path .. ": cannot read: " .. tostring(rerr) end
  local chunk, perr = load(src, "@" .. path, "t")
  if not chunk then return nil, perr end
  local ok, v = xpcall(chunk, function(e) return e end)
  if not ok then return nil, describe(path, v, src) end
  return v, nil, src
end

-- Load every tools/*.lua of dir; names get prefix (a subagent's own tools are
-- registered as "<subagent>.<tool>", which no file name can clash with).
local function load_tools(tools_dir, prefix, errs, loaded)
  local names = {}
  for _, file in ipairs(core.listdir(tools_dir) or {}) do
    if file:sub(-4) == ".lua" then
      local name = file:sub(1, -5)
      local path = tools_dir .. "/" .. file
      local nerr = check_name(name)
      if nerr then
        errs[#errs + 1] = path .. ":1: " .. nerr
      else
        local v, err, src = load_file(path)
        if err then
          errs[#errs + 1] = err
        elseif not moor.isTool(v) then
          errs[#errs + 1] = ("%s:1: the file must return a tool: end it with "
            .. "`return moor.defineTool{ ... }` or `return moor.defineWorkflowTool{ ... }` (got %s)"):format(
            path, type(v))
        else
          loaded[#loaded + 1] = { name = prefix .. name, tool = v, hash = core.hash(src), path = path }
          names[name] = prefix .. name
        end
      end
    end
  end
  return names
end

local function load_agent_file(path, errs)
  local v, err = load_file(path)
  if err then
    errs[#errs + 1] = err
  elseif not (type(v) == "table" and v.kind == "agent" and moor.isTool(v)) then
    errs[#errs + 1] = path .. ":1: agent.lua must return moor.defineAgent{ model, description, instructions }"
  else
    return v
  end
end

function M.load(dir, engine)
  dir = (dir or "agent"):gsub("/+$", "")
  local errs = {}
  local entries, lerr = core.listdir(dir)
  if not entries then
    return nil, ("cannot load agent: %s (pass --agent DIR with an agent project)"):format(lerr)
  end
  -- lib/ is on the module path both as `require "lib.x"` and `require "x"`.
  package.path = ("%s/?.lua;%s/?/init.lua;%s/lib/?.lua;%s/lib/?/init.lua;"):format(dir, dir, dir, dir)
    .. package.path

  local has = {}
  for _, e in ipairs(entries) do has[e] = true end

  local loaded = {}
  local root_tools = has["tools"] and load_tools(dir .. "/tools", "", errs, loaded) or {}

  local agent
  if has["agent.lua"] then agent = load_agent_file(dir .. "/agent.lua", errs) end

  -- agent/subagents/<name>/agent.lua: each with its own tools/ folder, or
  -- the root's tools when it has none.
  local subagents = {}
  if has["subagents"] then
    for _, name in ipairs(core.listdir(dir .. "/subagents") or {}) do
      local sdir = dir .. "/subagents/" .. name
      local nerr = check_name(name)
      if name == "agent" then
        nerr = "the subagent name 'agent' is reserved for a copy of the root agent"
      elseif not nerr and root_tools[name] then
        nerr = ("subagent '%s' has the same name as the tool agent/tools/%s.lua"):format(name, name)
      end
      if nerr then
        nerr = nerr:gsub("^bad tool name", "bad subagent name"):gsub("a tool's file name", "a subagent's folder name")
        errs[#errs + 1] = sdir .. ":1: " .. nerr
      elseif not io.open(sdir .. "/agent.lua") then
        errs[#errs + 1] = sdir .. "/agent.lua:1: missing: a subagent folder needs an agent.lua"
      else
        local sub = load_agent_file(sdir .. "/agent.lua", errs)
        if sub then
          local own = core.listdir(sdir .. "/tools")
          sub.toolset = own and load_tools(sdir .. "/tools", name .. ".", errs, loaded) or nil
          subagents[name] = sub
        end
      end
    end
  end
  if next(subagents) and not agent then
    errs[#errs + 1] = dir .. "/agent.lua:1: missing: subagents need a root agent.lua"
  end

  if #errs > 0 then
    table.sort(errs)
    return nil, ("%d broken file%s in %s; nothing was run:\n  %s"):format(#errs, #errs == 1 and "" or "s",
      dir, table.concat(errs, "\n  "))
  end
  for _, l in ipairs(loaded) do
    l.tool.file = l.path
    engine.register(l.name, moor._bind(l.tool, l.name, l.hash))
  end
  engine.agent = agent
  if agent then
    agent.name = "agent"
    agent.toolset = root_tools
    for name, sub in pairs(subagents) do
      sub.name = name
      sub.toolset = sub.toolset or root_tools
      if sub.tool ~= false then
        local t = session.subagent_tool(name, sub)
        engine.register(name, t)
        root_tools[name] = name
      end
    end
    engine.agents = subagents
    engine.register(session.TOOL, session.tool())
  end
  return true
end

return M
