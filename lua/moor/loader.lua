--- Loads an agent project: every tools/*.lua, and agent.lua when present,
-- with lib/ on the module path. Every broken file is reported at once, each
-- with its file and line; nothing runs when any file is broken.
--
-- moor's built-in tools (the top-level tools/ folder: ask_question, sleep)
-- are loaded for every agent, unless the agent has a tool of the same name
-- (its own wins) or agent/tools/<name>.lua returns moor.disableTool().
-- tools/subagent.lua makes the tool of each subagent the model can call.
local core = require "moor.core"
local define = require "moor.authoring.define"
local session = require "moor.session"
local connection = require "moor.auth.connection"

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
    if line:find("define%a*Tool%s*[{(]") or line:find("defineAgent%s*[{(]") or line:find("defineConnection%s*[{(]")
        or line:find("r[e]quire%s*%(?%s*[\"']moor%.tools%.") then return n end -- (r[e]: a pattern, not a call)
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

local function sorted_lua_files(dir)
  local files = {}
  for _, file in ipairs(core.listdir(dir) or {}) do
    if file:sub(-4) == ".lua" then files[#files + 1] = file end
  end
  table.sort(files)
  return files
end

-- builtin: the module name of one of moor's built-in tools ("moor.tools.x"),
-- whose chunk precompiled at build time is used while the file is unchanged
-- (host/luab.c); an agent's own files are always loaded from source, as text.
local function load_file(path, builtin)
  local src, rerr = read_file(path)
  if not src then return nil, path .. ": cannot read: " .. tostring(rerr) end
  local chunk, perr = builtin and core.precompiled(builtin, path), nil
  if not chunk then chunk, perr = load(src, "@" .. path, "t") end
  if not chunk then return nil, perr end
  local ok, v = xpcall(chunk, function(e) return e end)
  if not ok then return nil, describe(path, v, src) end
  return v, nil, src
end

-- Load every tools/*.lua of dir; names get prefix (a subagent's own tools are
-- registered as "<subagent>.<tool>", which no file name can clash with).
-- Returns the names it loaded (model-facing -> registered) and the names its
-- files disable (moor.disableTool(): name -> path).
local function load_tools(tools_dir, prefix, errs, loaded)
  local names, disabled = {}, {}
  for _, file in ipairs(sorted_lua_files(tools_dir)) do
    local name = file:sub(1, -5)
    local path = tools_dir .. "/" .. file
    local nerr = check_name(name)
    if nerr then
      errs[#errs + 1] = path .. ":1: " .. nerr
    else
      local v, err, src = load_file(path)
      if err then
        errs[#errs + 1] = err
      elseif define.isDisabledTool(v) then
        disabled[name] = path
      elseif not define.isTool(v) then
        errs[#errs + 1] = ("%s:1: the file must return a tool: end it with "
          .. "`return moor.defineTool{ ... }` or `return moor.defineWorkflowTool{ ... }`, "
          .. "or `return moor.disableTool()` to hide the built-in tool or subagent of its name (got %s)"):format(
          path, type(v))
      else
        loaded[#loaded + 1] = { name = prefix .. name, tool = v, hash = core.hash(src), path = path }
        names[name] = prefix .. name
      end
    end
  end
  return names, disabled
end

-- moor's own tools/ folder: installed as moor/tools/ next to this file (the
-- layout of cmake --install and the rockspec), or beside the lua/ directory
-- this file was loaded from (the source tree: what a program run from the
-- build tree uses, host/paths.c; $MOOR_LUA_DIR; or a package.path to lua/).
local function builtin_dir()
  local src = debug.getinfo(1, "S").source
  local here = src:sub(1, 1) == "@" and src:sub(2):match("^(.*)/[^/]*$") or "."
  local tried = {}
  for _, d in ipairs { here .. "/tools", here .. "/../../tools" } do
    if core.listdir(d) then return d end
    tried[#tried + 1] = d
  end
  return nil, ("moor's built-in tools are missing: no tools/ folder at %s (install moor with its tools/ "
    .. "folder beside lua/, or moor/tools/ beside moor/loader.lua)"):format(table.concat(tried, " or "))
end
M.builtin_dir = builtin_dir

-- `require "moor.tools.<name>"` finds a built-in tool's file in the source
-- tree too (installed, moor/tools/ is on the module path already): an agent
-- enables a factory with `return require("moor.tools.workflow") { ... }`.
table.insert(package.searchers, function(modname)
  local name = modname:match("^moor%.tools%.([%w_]+)$")
  if not name then return nil end
  local dir = builtin_dir()
  local path = dir and dir .. "/" .. name .. ".lua"
  local f = path and io.open(path, "rb")
  if not f then return ("\n\tno built-in tool file for '%s'"):format(modname) end
  f:close()
  local chunk, err = core.precompiled(modname, path), nil
  if not chunk then chunk, err = loadfile(path, "t") end
  if not chunk then error(err, 0) end
  return chunk, path
end)

--- moor's built-in tools: { tools = { name -> { tool, hash, path } },
-- factories = { name -> { make, hash, path } } } (a file that returns a
-- function is a factory, as subagent.lua), or nil, message.
function M.builtins()
  local dir, derr = builtin_dir()
  if not dir then return nil, derr end
  local out, errs = { tools = {}, factories = {} }, {}
  for _, file in ipairs(sorted_lua_files(dir)) do
    local name, path = file:sub(1, -5), dir .. "/" .. file
    local v, err, src = load_file(path, "moor.tools." .. name)
    if err then
      errs[#errs + 1] = err
    elseif type(v) == "function" then
      out.factories[name] = { make = v, hash = core.hash(src), path = path }
    elseif define.isTool(v) then
      out.tools[name] = { tool = v, hash = core.hash(src), path = path }
    else
      errs[#errs + 1] = path .. ":1: a built-in tool file must return a tool or a function that makes one"
    end
  end
  if #errs > 0 then return nil, table.concat(errs, "\n  ") end
  return out
end

--- The tool that exposes subagent `name` (its agent definition `sub`) to
-- the root model, made by tools/subagent.lua and bound to the name.
function M.subagent_tool(name, sub, builtins)
  local b = builtins
  if not b then b = assert(M.builtins()) end
  local f = assert(b.factories.subagent, "moor's tools/subagent.lua is missing")
  -- The hash names the subagent (not the file), as before tools/ existed, so
  -- older runs replay without a source-change note.
  return define._bind(f.make(name, sub), name, core.hash("moor.subagent/" .. name))
end

--- Register the built-in tools an engine has no tool of that name for (an
-- agent defined in a spec, as moor.testing.converse holds, sees them too).
function M.register_builtins(engine)
  local b, err = M.builtins()
  if not b then error(err, 2) end
  for name, x in pairs(b.tools) do
    if not engine.tools[name] then
      x.tool.file = x.path
      engine.register(name, define._bind(x.tool, name, x.hash))
    end
  end
end

-- Add the built-ins to a toolset (model-facing -> registered names), but
-- not over the agent's own tools nor those its files disable.
local function add_builtins(set, disabled, builtins)
  for name, b in pairs(builtins.tools) do
    if set[name] == nil and not disabled[name] then set[name] = b.registered end
  end
end

-- A disableTool file must name something to hide.
local function check_disabled(disabled, builtins, subagents, errs)
  for name, path in pairs(disabled) do
    if not builtins.tools[name] and not (subagents and (subagents[name] or name == "agent")) then
      local list = {}
      for n in pairs(builtins.tools) do
        if n:sub(1, 6) ~= "moor__" then list[#list + 1] = n end -- (the task tools come with task tools)
      end
      table.sort(list)
      errs[#errs + 1] = ("%s:1: moor.disableTool() hides a built-in tool or a subagent, and none is named '%s' "
        .. "(the built-in tools: %s)"):format(path, name, table.concat(list, ", "))
    end
  end
end

local function load_agent_file(path, errs)
  local v, err = load_file(path)
  if err then
    errs[#errs + 1] = err
  elseif not (type(v) == "table" and v.kind == "agent" and define.isTool(v)) then
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

  local builtins, berr = M.builtins()
  if not builtins then return nil, berr end

  -- agent/connections/<name>.lua, before the tools that name them.
  local connections = {}
  if has["connections"] then
    for _, file in ipairs(sorted_lua_files(dir .. "/connections")) do
      local path = dir .. "/connections/" .. file
      local name = file:sub(1, -5)
      local v, err = load_file(path)
      if err then
        errs[#errs + 1] = err
      elseif not connection.is_definition(v) then
        errs[#errs + 1] = ("%s:1: the file must return a connection: end it with `return moor.defineConnection{ "
          .. "description, authorizationUrl, tokenUrl, clientId }` (got %s)"):format(path, type(v))
      else
        connections[name] = v
      end
    end
  end
  connection.registry, connection.loaded = connections, true

  local loaded = {}
  local root_tools, root_off = {}, {}
  if has["tools"] then root_tools, root_off = load_tools(dir .. "/tools", "", errs, loaded) end

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
          if own then
            local off
            sub.toolset, off = load_tools(sdir .. "/tools", name .. ".", errs, loaded)
            check_disabled(off, builtins, nil, errs)
            sub.disabled = off
          end
          subagents[name] = sub
        end
      end
    end
  end
  if next(subagents) and not agent then
    errs[#errs + 1] = dir .. "/agent.lua:1: missing: subagents need a root agent.lua"
  end
  check_disabled(root_off, builtins, subagents, errs)

  if #errs > 0 then
    table.sort(errs)
    return nil, ("%d broken file%s in %s; nothing was run:\n  %s"):format(#errs, #errs == 1 and "" or "s",
      dir, table.concat(errs, "\n  "))
  end
  -- The built-ins first, so that nothing of the agent's is replaced; one the
  -- root agent takes the name of (its own tool, a subagent) is registered
  -- as moor.<name> for the subagents that still see it.
  for name, b in pairs(builtins.tools) do
    local taken = root_tools[name] or (subagents[name] and subagents[name].tool ~= false and not root_off[name])
    b.registered = taken and ("moor." .. name) or name
    b.tool.file = b.path
    engine.register(b.registered, define._bind(b.tool, b.registered, b.hash))
  end
  for _, l in ipairs(loaded) do
    l.tool.file = l.path
    engine.register(l.name, define._bind(l.tool, l.name, l.hash))
  end
  engine.agent = agent
  if agent then
    agent.name = "agent"
    agent.toolset = root_tools
    local shared = {}
    for name, sub in pairs(subagents) do
      sub.name = name
      if sub.toolset then add_builtins(sub.toolset, sub.disabled, builtins) else shared[#shared + 1] = sub end
      sub.disabled = nil
      if sub.tool ~= false and not root_off[name] then
        engine.register(name, M.subagent_tool(name, sub, builtins))
        root_tools[name] = name
      end
    end
    add_builtins(root_tools, root_off, builtins)
    -- A subagent with no tools/ of its own has the root's, but not the
    -- root-copy target (seed 000: only a top-level root session offers it).
    local without_copy = {}
    for k, v in pairs(root_tools) do without_copy[k] = v end
    for _, sub in ipairs(shared) do sub.toolset = without_copy end
    -- `agent`: a copy of the root agent, as a serve tool (tools/subagent.lua),
    -- unless agent/tools/agent.lua replaces it or disables it.
    if not root_tools.agent and not root_off.agent then
      engine.register("agent", M.subagent_tool("agent", agent, builtins))
      root_tools.agent = "agent"
    end
    engine.agents = subagents
    engine.register(session.TOOL, session.tool())
  end
  return true
end

return M
