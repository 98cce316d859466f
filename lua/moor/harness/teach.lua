--- moor.harness.teach: every text a harness agent (Claude Code, Codex, any
-- program) reads about its tools (issue 11, seed 001 "What the agent runs"),
-- and the launcher's flag parser. Pure: it requires moor.json only, touches no
-- engine, and its output depends only on its arguments.
--
--   answer_block(launcher, schema) how to answer the turn (before the tools' block)
--   prompt_block(launcher, tools)  the block that ends every turn's prompt
--   is_small(schema)               is an input taught (and read) as flags?
--   flag_usage(schema)             "--file <text, at least 1 character> ..."
--   parse_flags(schema, argv)      argv of `wfa tool <name> ...` -> input
--   codes_text(limits)             what `wfa tool` with no arguments prints
--   CODES, EXIT, LIMITS, HANDBACK  the codes, their exit statuses, the limits
--
-- tools: a list of { name, description, input = <JSON Schema object> | nil };
-- the block lists them sorted by name whatever the list's order.
local json = require "moor.json"

local type, pairs, ipairs, next, tostring, tonumber = type, pairs, ipairs, next, tostring, tonumber
local math_type, tointeger, huge = math.type, math.tointeger, math.huge
local concat, sort = table.concat, table.sort
local fmt, find, sub, gsub = string.format, string.find, string.sub, string.gsub

local M = {}

local function err(code, message)
  return { code = code, message = message }
end

---------------------------------------------------------------------------
-- Limits, codes and exit statuses
---------------------------------------------------------------------------

local KIB, MIB = 1024, 1024 * 1024

-- Defaults; codes_text(limits) shows any given over them.
M.LIMITS = {
  value_bytes = MIB,            -- a request's value (tool input, answer)
  response_bytes = 256 * KIB,   -- one response on the socket
  stdin_seconds = 30,           -- reading the JSON input on standard input
  connections = 64,             -- connections at once, per agent
  connection_seconds = 30,      -- one connection's lifetime
  handler_seconds = 30,         -- a handler's default budget (timeout = "2m" / false)
  grace_seconds = 5,            -- after call.signal aborts
  result_bytes = 64 * KIB,      -- a handler's result, as JSON
  tools = 16,                   -- tools per agent
}

-- Every exit and refusal code of the launcher, in the order `wfa tool` lists
-- them. The code is the first word wfa writes on standard error, but for a
-- failed call: its standard error is exactly the handler's message.
M.CODES = {
  { code = "ok", exit = 0,
    text = "the tool ran; its result is on standard output (nothing if it returned nothing)" },
  { code = "failed", exit = 1,
    text = "the handler threw, or returned a result that isn't JSON or is over %s as JSON; "
      .. "standard error has its message" },
  { code = "invalid-input", exit = 2,
    text = "the input doesn't fit the tool; standard error says what was wrong; "
      .. "the handler didn't run: fix the input and call again" },
  { code = "unknown-tool", exit = 3,
    text = "there is no tool of that name; the prompt lists your tools" },
  { code = "busy", exit = 4, retry = true,
    text = "another call of yours is running (one call at a time, and no result or waiting "
      .. "while it runs): call again once it has answered" },
  { code = "outside-a-turn", exit = 5,
    text = "you are not working on a turn, or its answer was already accepted: "
      .. "a tool can be called only during a turn" },
  { code = "timed-out", exit = 6,
    text = "the handler's time was up, or the turn ended; the call may have run" },
  { code = "too-many-connections", exit = 7, retry = true,
    text = "over %d connections at once; nothing was done: call again" },
  { code = "bad-request", exit = 8,
    text = "the request is malformed, of another version, has unknown fields, is over %s, "
      .. "or standard input took over %d s; nothing was done" },
  { code = "unreachable", exit = 9,
    text = "the workflow's socket can't be reached (the workflow is gone, or a sandbox "
      .. "blocks Unix sockets: standard error names the setting to change)" },
  { code = "invalid-answer", exit = 10,
    text = "wfa result: the answer doesn't fit the turn's schema; fix it and answer again "
      .. "in the same turn" },
}

M.EXIT = {}
for _, c in ipairs(M.CODES) do M.EXIT[c.code] = c.exit end

-- How long each harness lets a shell command run before it hands it back or
-- moves it to the background (seed 001 "Time": codex's is the shortest).
M.HANDBACK = {
  { harness = "codex", seconds = 10, how = "hands a running command back after 10 s" },
  { harness = "claude", seconds = 120,
    how = "stops a command after 2 minutes by default (BASH_DEFAULT_TIMEOUT_MS), 10 at most" },
}

local function bytes(n)
  if n >= MIB and n % MIB == 0 then return fmt("%d MiB", n // MIB) end
  if n >= KIB and n % KIB == 0 then return fmt("%d KiB", n // KIB) end
  return fmt("%d bytes", n)
end

local function seconds(n)
  return fmt("%s s", tostring(n))
end

---------------------------------------------------------------------------
-- Schemas taught as flags
---------------------------------------------------------------------------

local SCALAR = { string = true, integer = true, number = true, boolean = true }

local function is_list(t)
  if type(t) ~= "table" then return false end
  local n = 0
  for _ in pairs(t) do n = n + 1 end
  for i = 1, n do if t[i] == nil then return false end end
  return true
end

-- the kind of a property taught as a flag: "string" | "integer" | "number" |
-- "boolean" | "enum", or nil when a flag can't carry it
local function flag_kind(p)
  if type(p) ~= "table" then return nil end
  if p.anyOf ~= nil or p.oneOf ~= nil or p.allOf ~= nil or p["not"] ~= nil then return nil end
  if p.const ~= nil then return nil end
  if p.enum ~= nil then
    if not is_list(p.enum) or #p.enum == 0 then return nil end
    for _, v in ipairs(p.enum) do
      local tv = type(v)
      if tv ~= "string" and tv ~= "number" and tv ~= "boolean" then return nil end
    end
    return "enum"
  end
  local t = p.type
  if type(t) ~= "string" or not SCALAR[t] then return nil end
  return t
end

local function object_props(s)
  if type(s) ~= "table" then return nil end
  if s.type ~= nil and s.type ~= "object" then return nil end
  return s.properties
end

-- names in order: sorted, so the text never depends on a table's order
local function prop_names(props)
  local names = {}
  for name in pairs(props or {}) do names[#names + 1] = name end
  sort(names)
  return names
end

local function required_set(s)
  local r = {}
  if type(s.required) == "table" then
    for _, name in ipairs(s.required) do r[name] = true end
  end
  return r
end

--- True when schema has no properties at all: the tool is called by its name.
function M.takes_nothing(schema)
  if schema == nil then return true end
  local props = object_props(schema)
  return type(schema) == "table" and (schema.type == "object" or schema.type == nil)
    and next(props or {}) == nil and schema.additionalProperties ~= true
    and type(schema.additionalProperties) ~= "table"
    and schema.anyOf == nil and schema.oneOf == nil and schema.allOf == nil
end

--- A small input: a flat object whose properties are all strings, integers,
-- numbers, booleans or enums of those, named so a flag can carry the name,
-- and no other keys (no additionalProperties schema, no combinators).
function M.is_small(schema)
  if type(schema) ~= "table" or schema.type ~= "object" then return false end
  if schema.anyOf ~= nil or schema.oneOf ~= nil or schema.allOf ~= nil or schema["not"] ~= nil then
    return false
  end
  local ap = schema.additionalProperties
  if ap ~= nil and ap ~= false then return false end
  if schema.patternProperties ~= nil or schema.minProperties ~= nil or schema.maxProperties ~= nil then
    return false
  end
  local props = schema.properties
  if type(props) ~= "table" or next(props) == nil then return false end
  for name, p in pairs(props) do
    if type(name) ~= "string" or not find(name, "^[%w_][%w_%-]*$") then return false end
    if not flag_kind(p) then return false end
  end
  return true
end

local function num(x)
  if math_type(x) == "integer" then return tostring(x) end
  if x == huge then return "Infinity" end
  if x == -huge then return "-Infinity" end
  local s = fmt("%.14g", x)
  if tonumber(s) ~= x then s = fmt("%.17g", x) end
  return s
end

local function plural(n, unit)
  if n == 1 then return "1 " .. unit end
  return num(n) .. " " .. unit .. "s"
end

local function enum_value(v)
  if type(v) == "string" then return v end
  if type(v) == "number" then return num(v) end
  return tostring(v)
end

-- What a flag's value must be, as the prompt shows it between < and >:
-- "text, at least 1 character", "integer, at least 1", "true or false".
function M.value_words(p)
  local kind = flag_kind(p)
  if kind == "enum" then
    local words = {}
    for i, v in ipairs(p.enum) do words[i] = enum_value(v) end
    return "one of " .. concat(words, ", ")
  end
  if kind == "boolean" then return "true or false" end
  local parts = {}
  if kind == "string" then
    local lo, hi = p.minLength, p.maxLength
    if lo == 0 then lo = nil end
    if lo and hi and lo == hi then
      parts[#parts + 1] = "exactly " .. plural(lo, "character")
    elseif lo and hi then
      parts[#parts + 1] = num(lo) .. " to " .. plural(hi, "character")
    elseif lo then
      parts[#parts + 1] = "at least " .. plural(lo, "character")
    elseif hi then
      parts[#parts + 1] = "at most " .. plural(hi, "character")
    end
    if type(p.pattern) == "string" then parts[#parts + 1] = "matching /" .. p.pattern .. "/" end
    if type(p.format) == "string" then parts[#parts + 1] = "format " .. p.format end
    kind = "text"
  else
    local lo, hi = p.minimum, p.maximum
    if lo ~= nil and hi ~= nil then
      parts[#parts + 1] = num(lo) .. " to " .. num(hi)
    elseif lo ~= nil then
      parts[#parts + 1] = "at least " .. num(lo)
    elseif hi ~= nil then
      parts[#parts + 1] = "at most " .. num(hi)
    end
    if p.exclusiveMinimum ~= nil then parts[#parts + 1] = "more than " .. num(p.exclusiveMinimum) end
    if p.exclusiveMaximum ~= nil then parts[#parts + 1] = "less than " .. num(p.exclusiveMaximum) end
    if p.multipleOf ~= nil then parts[#parts + 1] = "a multiple of " .. num(p.multipleOf) end
  end
  if #parts == 0 then return kind end
  return kind .. ", " .. concat(parts, ", ")
end

--- The flags of a small input as the prompt teaches them, sorted by name;
-- an optional one is in brackets: "--file <text> [--note <text>]".
function M.flag_usage(schema)
  local req = required_set(schema)
  local out = {}
  for _, name in ipairs(prop_names(schema.properties)) do
    local f = "--" .. name .. " <" .. M.value_words(schema.properties[name]) .. ">"
    if not req[name] then f = "[" .. f .. "]" end
    out[#out + 1] = f
  end
  return concat(out, " ")
end

---------------------------------------------------------------------------
-- The prompt's block
---------------------------------------------------------------------------

local function sorted_tools(tools)
  local list = {}
  for i, t in ipairs(tools or {}) do list[i] = t end
  sort(list, function(a, b) return a.name < b.name end)
  return list
end

local function one_line(s)
  s = gsub(tostring(s or ""), "%s*\n%s*", " ")
  return (gsub(s, "^%s+", ""):gsub("%s+$", ""))
end

--- The block that ends every turn's prompt (seed 001, word for word):
-- launcher is the launcher's absolute path; tools as the module's header says.
-- Returns the text, or nil and err for a tool whose input can't be encoded.
function M.prompt_block(launcher, tools)
  if type(launcher) ~= "string" or sub(launcher, 1, 1) ~= "/" then
    return nil, err("invalid-launcher", "the launcher's path must be absolute, got " .. tostring(launcher))
  end
  local out = {
    "You have tools the workflow runs for you. Call one with:",
    "",
    launcher .. " tool <name> --<option> '<value>' ...",
    "",
    "Put every value in single quotes; a ' inside a value is written '\\''.",
    "",
  }
  for _, t in ipairs(sorted_tools(tools)) do
    local name, input = t.name, t.input
    out[#out + 1] = "- " .. name .. ": " .. one_line(t.description)
    if M.takes_nothing(input) then
      out[#out + 1] = "  " .. launcher .. " tool " .. name
    elseif M.is_small(input) then
      out[#out + 1] = "  " .. launcher .. " tool " .. name .. " " .. M.flag_usage(input)
    else
      local text, e = json.encode(input)
      if not text then
        return nil, err("invalid-schema", fmt("tool %s: its input can't be taught as JSON Schema: %s",
          name, tostring(e)))
      end
      out[#out + 1] = "  Its input is JSON on standard input, with this JSON Schema:"
      out[#out + 1] = "  " .. text
      -- the heredoc at the line's start, so a copy of it runs as it reads
      out[#out + 1] = launcher .. " tool " .. name .. " <<'WF_JSON'"
      out[#out + 1] = "<the input as JSON>"
      out[#out + 1] = "WF_JSON"
    end
  end
  return concat(out, "\n")
end

--- How to answer the turn, before the tools' block: `<launcher> result`,
-- the answer's JSON Schema when the turn has one, and `waiting`.
function M.answer_block(launcher, schema)
  local out = {
    "When you have finished, answer with:",
    "",
    launcher .. " result '<your answer>'",
    "",
  }
  if schema ~= nil then
    out[#out + 1] = "Your answer is JSON that fits this JSON Schema:"
    out[#out + 1] = json.encode(schema)
  else
    out[#out + 1] = "Your answer is text, or JSON."
  end
  out[#out + 1] = "Put it in single quotes as a tool's value, or send a long one on standard input:"
  out[#out + 1] = launcher .. " result <<'WF_JSON'"
  out[#out + 1] = "<your answer>"
  out[#out + 1] = "WF_JSON"
  out[#out + 1] = "An answer that is refused can be fixed and given again. While you wait for something slow,"
    .. " you may say so with:"
  out[#out + 1] = launcher .. " waiting --reason '<what you are waiting for>'"
  return concat(out, "\n")
end

---------------------------------------------------------------------------
-- Reading flags
---------------------------------------------------------------------------

local function shown(s)
  -- the value as the agent would quote it
  return "'" .. gsub(s, "'", "'\\''") .. "'"
end

local function is_json_number(s)
  return find(s, "^%-?%d+%.?%d*$") ~= nil or find(s, "^%-?%d+%.%d+[eE][%+%-]?%d+$") ~= nil
    or find(s, "^%-?%d+[eE][%+%-]?%d+$") ~= nil
end

local function convert(name, p, raw)
  local kind = flag_kind(p)
  if kind == "string" then return raw end
  if kind == "integer" then
    local v = find(raw, "^%-?%d+$") and tointeger(tonumber(raw))
    if not v then
      return nil, fmt("--%s must be an integer, got %s", name, shown(raw))
    end
    return v
  end
  if kind == "number" then
    local v = is_json_number(raw) and tonumber(raw)
    if not v or v ~= v or v == huge or v == -huge then
      return nil, fmt("--%s must be a number, got %s", name, shown(raw))
    end
    return v
  end
  if kind == "boolean" then
    if raw == "true" then return true end
    if raw == "false" then return false end
    return nil, fmt("--%s must be true or false, got %s", name, shown(raw))
  end
  -- enum: the member whose text is the value
  for _, v in ipairs(p.enum) do
    if enum_value(v) == raw then return v end
  end
  return nil, fmt("--%s must be %s, got %s", name, M.value_words(p), shown(raw))
end

--- Read the arguments after `wfa tool <name>` into the tool's input. Both
-- `--flag value` and `--flag=value`; each flag at most once. Types are kept
-- (an integer flag gives a Lua integer). Checks names, values' types and that
-- every required flag is there; the caller then validates the input against
-- the schema (lengths, bounds, patterns), as for JSON input.
-- An input taught as JSON is refused here: it comes on standard input.
-- Returns input, or nil and err = { code = "invalid-input", message }.
function M.parse_flags(schema, argv)
  local function refuse(message)
    return nil, err("invalid-input", message)
  end
  if not M.takes_nothing(schema) and not M.is_small(schema) then
    return refuse("this tool takes its input as JSON on standard input, not as options:"
      .. " send it with <<'WF_JSON', as the prompt shows")
  end
  local props = (type(schema) == "table" and schema.properties) or {}
  local names = prop_names(props)
  local input = {}
  local function options()
    local l = {}
    for i, n in ipairs(names) do l[i] = "--" .. n end
    if #l == 0 then return "this tool takes no options" end
    return "the options are " .. concat(l, ", ")
  end
  local i, n = 1, #(argv or {})
  while i <= n do
    local a = argv[i]
    if sub(a, 1, 2) ~= "--" or #a == 2 then
      return refuse(fmt("expected an option such as --%s, got %s; put every value right after its option",
        names[1] or "name", shown(a)))
    end
    local name, raw = a:match("^%-%-([^=]+)=(.*)$")
    if not name then
      name = sub(a, 3)
      if props[name] ~= nil and i + 1 > n then
        return refuse(fmt("--%s needs a value: --%s <%s>", name, name, M.value_words(props[name])))
      end
      raw = argv[i + 1]
      i = i + 2
    else
      i = i + 1
    end
    local p = props[name]
    if p == nil then
      return refuse(fmt("unknown option --%s; %s", name, options()))
    end
    if input[name] ~= nil then
      return refuse(fmt("--%s is given more than once; give it once", name))
    end
    local v, e = convert(name, p, raw)
    if v == nil then return refuse(e) end
    input[name] = v
  end
  local req = required_set(schema or {})
  local missing = {}
  for _, name in ipairs(names) do
    if req[name] and input[name] == nil then
      missing[#missing + 1] = "--" .. name .. " <" .. M.value_words(props[name]) .. ">"
    end
  end
  if #missing == 1 then return refuse("missing " .. missing[1]) end
  if #missing > 1 then return refuse("missing " .. concat(missing, ", ")) end
  return input
end

---------------------------------------------------------------------------
-- `wfa tool` with no arguments
---------------------------------------------------------------------------

--- What `wfa tool` prints with no arguments: how to call, every exit and
-- refusal code with its exit status, the limits, and each harness's limit.
-- limits: overrides of M.LIMITS (nil for the defaults).
function M.codes_text(limits)
  local L = {}
  for k, v in pairs(M.LIMITS) do L[k] = v end
  for k, v in pairs(limits or {}) do L[k] = v end
  local out = {
    "Call a tool with:",
    "  wfa tool <name> --<option> '<value>' ...",
    "  wfa tool <name> <<'WF_JSON'   (a tool taught as JSON: its input on standard input)",
    "  wfa tool <name>               (a tool without input)",
    "It exits 0 with the tool's result on standard output, or nonzero with the code",
    "and what went wrong on standard error.",
    "",
    "Exit status and code:",
  }
  local args = {
    failed = { bytes(L.result_bytes) },
    ["too-many-connections"] = { L.connections },
    ["bad-request"] = { bytes(L.value_bytes), L.stdin_seconds },
  }
  for _, c in ipairs(M.CODES) do
    local text = c.text
    local a = args[c.code]
    if a then text = fmt(text, a[1], a[2]) end
    out[#out + 1] = fmt("  %-3d %-21s %s%s", c.exit, c.code, text, c.retry and " (retryable)" or "")
  end
  out[#out + 1] = ""
  out[#out + 1] = "Limits:"
  out[#out + 1] = "  a value (tool input or answer): " .. bytes(L.value_bytes)
  out[#out + 1] = "  a response: " .. bytes(L.response_bytes)
  out[#out + 1] = "  reading standard input: " .. seconds(L.stdin_seconds)
  out[#out + 1] = "  connections at once: " .. L.connections
  out[#out + 1] = "  a connection's lifetime: " .. seconds(L.connection_seconds)
  out[#out + 1] = "  a handler: " .. seconds(L.handler_seconds) .. " unless the tool sets its own (the turn's"
    .. " deadline always bounds it), then " .. seconds(L.grace_seconds) .. " of grace; then timed-out"
  out[#out + 1] = "  a result: " .. bytes(L.result_bytes) .. " as JSON"
  out[#out + 1] = "  tools per agent: " .. L.tools .. ", named in lowercase letters, digits and _"
  out[#out + 1] = "  one call at a time; a call repeated with the same input while it runs gets its answer"
  out[#out + 1] = ""
  out[#out + 1] = "How long each harness waits for a shell command before handing it back:"
  for _, h in ipairs(M.HANDBACK) do
    out[#out + 1] = fmt("  %-7s %s", h.harness, h.how)
  end
  out[#out + 1] = "A call that can outlast that limit may run twice: a call made after it ended runs the handler again."
  return concat(out, "\n") .. "\n"
end

return M
