--- moor.schema's builders: moor.schema.object/string/integer/number/boolean/
-- null/any/array/enum and optional(). Each builds a plain JSON Schema table
-- (the same table goes to LLM providers) and checks it where it is written.
-- Optional markers live outside the schema so it stays pure JSON Schema.
local words = require "moor.schema.words"
local check = require "moor.schema.check"

local type, pairs, tostring, error, setmetatable = type, pairs, tostring, error, setmetatable
local sort = table.sort
local fmt, lower = string.format, string.lower
local json_array, json_null, quote, display = words.json_array, words.json_null, words.quote, words.display
local KEYWORDS_LOWER, is_list = check.KEYWORDS_LOWER, check.is_list

local M = {}

local optional_set = setmetatable({}, { __mode = "k" })


local COMMON = { description = true, title = true, default = true, examples = true }

local function option_set(...)
  local set = {}
  for k in pairs(COMMON) do set[k] = true end
  for _, k in ipairs({ ... }) do set[k] = true end
  return set
end

local STRING_OPTS = option_set("minLength", "maxLength", "pattern", "format", "enum")
local NUMBER_OPTS = option_set("minimum", "maximum", "exclusiveMinimum", "exclusiveMaximum", "enum")
local BOOLEAN_OPTS = option_set()
local ARRAY_OPTS = option_set("minItems", "maxItems")
local OBJECT_OPTS = option_set("additionalProperties")
local ENUM_OPTS = option_set()
local NULL_OPTS = { description = true, title = true }
local ANY_OPTS = option_set()

local function copy_list(t)
  local r = {}
  for i = 1, #t do r[i] = t[i] end
  return json_array(r)
end

-- Copies known options into s; raises (at the builder's caller) on unknown ones.
local function apply_opts(name, s, opts, allowed)
  if opts == nil then return s end
  if type(opts) ~= "table" then
    error(fmt("schema.%s: options must be a table, got %s", name, type(opts)), 3)
  end
  local keys = {}
  for k in pairs(opts) do keys[#keys + 1] = tostring(k) end
  sort(keys)
  for _, k in ipairs(keys) do
    if not allowed[k] then
      local near = KEYWORDS_LOWER[lower(k)]
      local hint = near and allowed[near] and fmt(" (did you mean %s?)", near) or ""
      error(fmt("schema.%s: unknown option %s%s", name, quote(k), hint), 3)
    end
  end
  for k, v in pairs(opts) do
    if (k == "enum" or k == "examples") and is_list(v) then v = copy_list(v) end
    s[k] = v
  end
  return s
end

-- Full check of the built schema so nonsense fails where it is written.
local function finish(name, s)
  local ok, msg = check.check(s)
  if not ok then error(fmt("schema.%s: %s", name, msg), 3) end
  return s
end

function M.string(opts)
  local s = apply_opts("string", { type = "string" }, opts, STRING_OPTS)
  if s.enum ~= nil and is_list(s.enum) then
    for i = 1, #s.enum do
      if type(s.enum[i]) ~= "string" then
        error(fmt("schema.string: enum[%d] must be a string, got %s", i, display(s.enum[i])), 2)
      end
    end
  end
  return (finish("string", s))
end

function M.integer(opts)
  return (finish("integer", apply_opts("integer", { type = "integer" }, opts, NUMBER_OPTS)))
end

function M.number(opts)
  return (finish("number", apply_opts("number", { type = "number" }, opts, NUMBER_OPTS)))
end

function M.boolean(opts)
  return (finish("boolean", apply_opts("boolean", { type = "boolean" }, opts, BOOLEAN_OPTS)))
end

function M.null(opts)
  return (finish("null", apply_opts("null", { type = "null" }, opts, NULL_OPTS)))
end

function M.any(opts)
  return (finish("any", apply_opts("any", {}, opts, ANY_OPTS)))
end

function M.array(items, opts)
  if items ~= nil and type(items) ~= "table" and type(items) ~= "boolean" then
    error("schema.array: items must be a schema, got " .. type(items), 2)
  end
  local s = apply_opts("array", { type = "array", items = items }, opts, ARRAY_OPTS)
  return (finish("array", s))
end

function M.enum(values, opts)
  if not is_list(values) or #values == 0 then
    error("schema.enum: values must be a non-empty list", 2)
  end
  local list, all_strings = {}, true
  for i = 1, #values do
    local v = values[i]
    local tv = type(v)
    if not (tv == "string" or tv == "number" or tv == "boolean" or (json_null ~= nil and v == json_null)) then
      error(fmt("schema.enum: values[%d] must be a string, number, boolean or null, got %s", i, tv), 2)
    end
    for j = 1, i - 1 do
      if list[j] == v then error(fmt("schema.enum: duplicate value %s", display(v)), 2) end
    end
    if tv ~= "string" then all_strings = false end
    list[i] = v
  end
  local s = { enum = json_array(list) }
  if all_strings then s.type = "string" end
  return (finish("enum", apply_opts("enum", s, opts, ENUM_OPTS)))
end

function M.object(props, opts)
  if props ~= nil and type(props) ~= "table" then
    error("schema.object: properties must be a table of schemas, got " .. type(props), 2)
  end
  local properties, required = {}, {}
  for name, sub in pairs(props or {}) do
    if type(name) ~= "string" then
      error("schema.object: property names must be strings, got " .. display(name), 2)
    end
    if type(sub) ~= "table" and type(sub) ~= "boolean" then
      error(fmt("schema.object: property %s must be a schema, got %s", quote(name), type(sub)), 2)
    end
    properties[name] = sub
    if not optional_set[sub] then required[#required + 1] = name end
  end
  sort(required)
  local s = { type = "object", properties = properties }
  if #required > 0 then s.required = json_array(required) end
  return (finish("object", apply_opts("object", s, opts, OBJECT_OPTS)))
end

--- Mark a schema optional for the enclosing object. Returns a shallow copy so
-- a schema shared between fields is not made optional everywhere.
function M.optional(s)
  if type(s) ~= "table" then
    error("schema.optional: expected a schema table, got " .. type(s), 2)
  end
  local c = {}
  for k, v in pairs(s) do c[k] = v end
  setmetatable(c, getmetatable(s))
  optional_set[c] = true
  return c
end

function M.is_optional(s)
  return optional_set[s] == true
end

M.null_value = json_null

return M
