--- moor.schema's checker of schemas themselves: check(s) says whether s is a
-- schema moor understands (known keywords, sane bounds, patterns that
-- compile), with the schema path of the first problem. Definitions
-- (defineTool's inputSchema/outputSchema) and the builders check through it.
local words = require "moor.schema.words"
local validate = require "moor.schema.validate"

local type, pairs = type, pairs
local math_type, floor = math.type, math.floor
local concat, sort = table.concat, table.sort
local fmt, lower = string.format, string.lower
local TYPES, TYPE_ORDER = words.TYPES, words.TYPE_ORDER
local kind_of, is_finite, fmt_num, quote, display, format_path =
  words.kind_of, words.is_finite, words.fmt_num, words.quote, words.display, words.format_path
local compile_regex = validate.compile_regex

local M = {}

local ANNOTATION_STRINGS = {
  description = true, title = true, format = true,
  ["$schema"] = true, ["$comment"] = true, ["$id"] = true,
}
local ANNOTATION_BOOLEANS = { readOnly = true, writeOnly = true, deprecated = true }

local KEYWORDS = {
  type = true, properties = true, required = true, additionalProperties = true,
  items = true, minItems = true, maxItems = true, minLength = true, maxLength = true,
  pattern = true, minimum = true, maximum = true, exclusiveMinimum = true,
  exclusiveMaximum = true, enum = true, const = true, anyOf = true, oneOf = true,
  allOf = true, default = true, examples = true,
}
for k in pairs(ANNOTATION_STRINGS) do KEYWORDS[k] = true end
for k in pairs(ANNOTATION_BOOLEANS) do KEYWORDS[k] = true end

local KEYWORDS_LOWER = {}
for k in pairs(KEYWORDS) do KEYWORDS_LOWER[lower(k)] = k end

-- Keywords that only constrain one kind of value: with a `type` that excludes
-- it they are dead code, which is almost always a typo in the schema.
local APPLIES_TO = {
  minLength = "string", maxLength = "string", pattern = "string",
  minimum = "number", maximum = "number", exclusiveMinimum = "number", exclusiveMaximum = "number",
  items = "array", minItems = "array", maxItems = "array",
  properties = "object", required = "object", additionalProperties = "object",
}

local MAX_DEPTH = 64

local function is_list(t)
  if type(t) ~= "table" then return false end
  local k = kind_of(t)
  return k == "array" or k == "empty"
end

local function type_display(t)
  if type(t) == "string" then return quote(t) end
  local parts = {}
  for i = 1, #t do parts[i] = quote(t[i]) end
  return "[" .. concat(parts, ", ") .. "]"
end

local function is_count(x)
  local mt = math_type(x)
  if mt == "integer" then return x >= 0 end
  return mt == "float" and x >= 0 and x == floor(x) and x < 2 ^ 53
end

local function is_number(x)
  return type(x) == "number" and is_finite(x)
end

local check_node

local function check_sub(sub, depth, ...)
  local w, p = check_node(sub, depth + 1)
  if not w then return nil end
  local keys = { ... }
  for i = #keys, 1, -1 do p[#p + 1] = keys[i] end
  return w, p
end

local function check_schema_list(s, kw, depth)
  local list = s[kw]
  if not is_list(list) or #list == 0 then
    return "must be a non-empty list of schemas", { kw }
  end
  for i = 1, #list do
    local w, p = check_sub(list[i], depth, kw, i)
    if w then return w, p end
  end
  return nil
end

local function check_count_pair(s, lo_kw, hi_kw)
  local lo, hi = s[lo_kw], s[hi_kw]
  if lo ~= nil and not is_count(lo) then
    return "must be a non-negative integer, got " .. display(lo), { lo_kw }
  end
  if hi ~= nil and not is_count(hi) then
    return "must be a non-negative integer, got " .. display(hi), { hi_kw }
  end
  if lo and hi and lo > hi then
    return fmt("%s is greater than %s %s", fmt_num(lo), hi_kw, fmt_num(hi)), { lo_kw }
  end
  return nil
end

local function check_bounds(s)
  local lows = { { "minimum", ">=" }, { "exclusiveMinimum", ">" } }
  local highs = { { "maximum", "<=" }, { "exclusiveMaximum", "<" } }
  for _, kw in ipairs({ "minimum", "exclusiveMinimum", "maximum", "exclusiveMaximum" }) do
    local x = s[kw]
    if x ~= nil and not is_number(x) then
      if type(x) == "boolean" then
        return "must be a number (the draft-04 boolean form is not supported)", { kw }
      end
      return "must be a number, got " .. display(x), { kw }
    end
  end
  for _, l in ipairs(lows) do
    local lo = s[l[1]]
    for _, h in ipairs(highs) do
      local hi = s[h[1]]
      if lo ~= nil and hi ~= nil and (lo > hi or (lo == hi and (l[2] == ">" or h[2] == "<"))) then
        return fmt("no number is %s %s and %s %s", l[2], fmt_num(lo), h[2], fmt_num(hi)), { l[1] }
      end
    end
  end
  return nil
end

function check_node(s, depth)
  if s == true or s == false then return nil end
  if type(s) ~= "table" then
    return "must be a schema (table or boolean), got " .. type(s), {}
  end
  if depth > MAX_DEPTH then return "is nested too deeply (a cycle?)", {} end

  local keys = {}
  for k in pairs(s) do
    if type(k) ~= "string" then
      return "must be a schema table with keyword keys, got key " .. display(k), {}
    end
    keys[#keys + 1] = k
  end
  sort(keys)
  for _, k in ipairs(keys) do
    if not KEYWORDS[k] then
      local near = KEYWORDS_LOWER[lower(k)]
      return "unknown keyword" .. (near and fmt(" (did you mean %s?)", near) or ""), { k }
    end
  end

  -- type
  local t = s.type
  local types
  if t ~= nil then
    types = {}
    if type(t) == "string" then
      if not TYPES[t] then
        return fmt("unknown type %s (expected %s)", quote(t), TYPE_ORDER), { "type" }
      end
      types[t] = true
    elseif is_list(t) and #t > 0 then
      for i = 1, #t do
        local tn = t[i]
        if type(tn) ~= "string" or not TYPES[tn] then
          return fmt("unknown type %s (expected %s)", display(tn), TYPE_ORDER), { i, "type" }
        end
        if types[tn] then return fmt("%s is listed twice", quote(tn)), { "type" } end
        types[tn] = true
      end
    else
      return "must be a type name or a non-empty list of type names", { "type" }
    end
    if types.integer then types.number = true end   -- APPLIES_TO says "number"
  end

  -- annotations
  for kw in pairs(ANNOTATION_STRINGS) do
    if s[kw] ~= nil and type(s[kw]) ~= "string" then
      return "must be a string, got " .. display(s[kw]), { kw }
    end
  end
  for kw in pairs(ANNOTATION_BOOLEANS) do
    if s[kw] ~= nil and type(s[kw]) ~= "boolean" then
      return "must be a boolean, got " .. display(s[kw]), { kw }
    end
  end
  if s.examples ~= nil and not is_list(s.examples) then
    return "must be a list of values", { "examples" }
  end

  -- keywords that cannot apply under the declared type
  if types then
    for _, k in ipairs(keys) do
      local need = APPLIES_TO[k]
      if need and not types[need] then
        return fmt("does not apply to type %s", type_display(t)), { k }
      end
    end
  end

  local w, p = check_count_pair(s, "minLength", "maxLength")
  if w then return w, p end
  w, p = check_count_pair(s, "minItems", "maxItems")
  if w then return w, p end
  w, p = check_bounds(s)
  if w then return w, p end

  if s.pattern ~= nil then
    if type(s.pattern) ~= "string" then
      return "must be a string, got " .. display(s.pattern), { "pattern" }
    end
    local re, err = compile_regex(s.pattern)
    if not re then
      return fmt("invalid regular expression /%s/: %s", s.pattern, err), { "pattern" }
    end
  end

  if s.enum ~= nil and (not is_list(s.enum) or #s.enum == 0) then
    return "must be a non-empty list", { "enum" }
  end

  local props = s.properties
  if props ~= nil then
    if type(props) ~= "table" or kind_of(props) == "array" or kind_of(props) == "mixed" then
      return "must be a table of schemas keyed by property name", { "properties" }
    end
    local names = {}
    for name in pairs(props) do names[#names + 1] = name end
    sort(names)
    for _, name in ipairs(names) do
      w, p = check_sub(props[name], depth, "properties", name)
      if w then return w, p end
    end
  end

  local req = s.required
  if req ~= nil then
    if not is_list(req) then return "must be a list of property names", { "required" } end
    local seen = {}
    for i = 1, #req do
      if type(req[i]) ~= "string" then
        return "must be a string, got " .. display(req[i]), { i, "required" }
      end
      if seen[req[i]] then return fmt("%s is listed twice", quote(req[i])), { "required" } end
      seen[req[i]] = true
    end
  end

  local ap = s.additionalProperties
  if ap ~= nil then
    if type(ap) ~= "boolean" and type(ap) ~= "table" then
      return "must be a boolean or a schema, got " .. type(ap), { "additionalProperties" }
    end
    w, p = check_sub(ap, depth, "additionalProperties")
    if w then return w, p end
  end

  local items = s.items
  if items ~= nil then
    if type(items) == "table" and kind_of(items) == "array" then
      return "must be a schema (the list/tuple form is not supported)", { "items" }
    end
    w, p = check_sub(items, depth, "items")
    if w then return w, p end
  end

  for _, kw in ipairs({ "allOf", "anyOf", "oneOf" }) do
    if s[kw] ~= nil then
      w, p = check_schema_list(s, kw, depth)
      if w then return w, p end
    end
  end
  return nil
end

--- Check that s is a schema this module understands.
-- check(s) -> true | nil, "<schema path>: <what>", path
function M.check(s)
  local w, p = check_node(s, 0)
  if not w then return true end
  local path = format_path(p, "schema")
  return nil, path .. ": " .. w, path
end

function M.is_schema(t)
  if t ~= true and t ~= false and type(t) ~= "table" then return false end
  return check_node(t, 0) == nil
end

M.KEYWORDS_LOWER, M.is_list = KEYWORDS_LOWER, is_list

return M
