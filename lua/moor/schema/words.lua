--- moor.schema's words: the value model of decoded JSON (what kind a value
-- is), the wording of messages (quoted strings, short renderings, "expected
-- a string, got 3"), and the path format ("input.items[2].name"). Shared by
-- the validator (validate.lua), the schema checker (check.lua) and the
-- builders (build.lua); it requires nothing of theirs.
local json = require "moor.json"

local type, pairs, next, tostring, getmetatable = type, pairs, next, tostring, getmetatable
local math_type, floor = math.type, math.floor
local concat = table.concat
local fmt, find, byte, gsub = string.format, string.find, string.byte, string.gsub

local M = {}

local json_array_fn = json.array
local json_null = json.null

-- moor.json.array marks a table so `{}` encodes as `[]`; keep the table even if
-- the marker function returns nothing.
local function json_array(t)
  local r = json_array_fn(t)
  if r == nil then return t end
  return r
end

local TYPES = {
  object = true, array = true, string = true, integer = true,
  number = true, boolean = true, null = true,
}
local TYPE_ORDER = "object, array, string, integer, number, boolean or null"

local NOUNS = {
  object = "an object", array = "an array", string = "a string", integer = "an integer",
  number = "a number", boolean = "a boolean", null = "null",
}

---------------------------------------------------------------------------
-- Value model
---------------------------------------------------------------------------

-- Kind of a decoded JSON value: "string", "integer", "number" (float),
-- "boolean", "null", "object", "array", "empty" (unmarked {}: object or
-- array), "mixed" (table that is neither) or "other" (not JSON).
local function kind_of(v)
  local tv = type(v)
  if tv == "string" then return "string" end
  if tv == "number" then
    if math_type(v) == "integer" then return "integer" end
    return "number"
  end
  if tv == "table" then
    local mt = getmetatable(v)
    if type(mt) == "table" then
      local jt = mt.__jsontype
      if jt == "array" then return "array" end
      if jt == "object" then return "object" end
    end
    if next(v) == nil then return "empty" end
    local n, max, strs = 0, 0, false
    for k in pairs(v) do
      if type(k) == "string" then
        strs = true
      elseif math_type(k) == "integer" and k >= 1 then
        n = n + 1
        if k > max then max = k end
      else
        return "mixed"
      end
    end
    if not strs then
      -- n distinct positive keys, the largest n: exactly 1..n
      if max == n then return "array" end
      return "mixed"
    end
    if n == 0 then return "object" end
    return "mixed"
  end
  if tv == "boolean" then return "boolean" end
  if v == nil or v == json_null then return "null" end
  return "other"
end

local function is_finite(v)
  return v == v and v - v == 0
end

local function type_is(tn, v, kind)
  if kind == "number" then
    -- floats: finite ones are numbers, integral ones also integers
    if tn == "number" then return is_finite(v) end
    return tn == "integer" and is_finite(v) and v == floor(v)
  end
  if tn == kind then return true end
  if tn == "number" then return kind == "integer" end
  if tn == "object" or tn == "array" then return kind == "empty" end
  return false
end

local function fmt_num(x)
  if math_type(x) == "integer" then return tostring(x) end
  if x ~= x then return "NaN" end
  if x == 1 / 0 then return "Infinity" end
  if x == -1 / 0 then return "-Infinity" end
  local s = fmt("%.14g", x)
  if tonumber(s) ~= x then s = fmt("%.17g", x) end
  return s
end

local ESCAPES = { ['"'] = '\\"', ["\\"] = "\\\\", ["\n"] = "\\n", ["\r"] = "\\r", ["\t"] = "\\t" }

local function quote(s)
  return '"' .. gsub(s, '[%c"\\]', function(c)
    return ESCAPES[c] or fmt("\\u%04x", byte(c))
  end) .. '"'
end

-- Short JSON-ish rendering of a value for messages.
local function display(v)
  local tv = type(v)
  if tv == "string" then
    if #v > 60 then return quote(v:sub(1, 57)) .. "..." end
    return quote(v)
  end
  if tv == "number" then return fmt_num(v) end
  if tv == "boolean" then return tostring(v) end
  local kind = kind_of(v)
  if kind == "null" then return "null" end
  if kind == "array" then return "[...]" end
  if kind == "object" or kind == "empty" or kind == "mixed" then return "{...}" end
  return tostring(v)
end

local function got_desc(v, kind, want_int)
  if kind == "number" then
    if not is_finite(v) then return "non-finite number" end
    if want_int then return fmt_num(v) end
    return "number"
  end
  if kind == "empty" then return "empty table" end
  if kind == "mixed" then return "table with mixed keys" end
  if kind == "other" then return type(v) end
  return kind
end

local function join_words(list, last_sep)
  local n = #list
  if n == 1 then return list[1] end
  return concat(list, ", ", 1, n - 1) .. (last_sep or " or ") .. list[n]
end

local function type_list(t)
  if type(t) == "string" then return { t } end
  return t
end

local function type_message(types, v, kind)
  local nouns, has_int, has_num = {}, false, false
  for i = 1, #types do
    local tn = types[i]
    nouns[i] = NOUNS[tn] or tn
    if tn == "integer" then has_int = true elseif tn == "number" then has_num = true end
  end
  return "must be " .. join_words(nouns) .. ", got " .. got_desc(v, kind, has_int and not has_num)
end

local function deep_equal(a, b)
  if a == b then return true end
  if type(a) ~= "table" or type(b) ~= "table" then return false end
  for k, x in pairs(a) do
    if not deep_equal(x, b[k]) then return false end
  end
  for k in pairs(b) do
    if a[k] == nil then return false end
  end
  return true
end

local function plural(n, unit)
  if n == 1 then return "1 " .. unit end
  return fmt_num(n) .. " " .. unit .. "s"
end

local function size_message(noun, unit, lo, hi)
  if lo and hi then
    if lo == hi then return fmt("must be %s of exactly %s", noun, plural(lo, unit)) end
    return fmt("must be %s of %s to %s", noun, fmt_num(lo), plural(hi, unit))
  end
  if lo then return fmt("must be %s of at least %s", noun, plural(lo, unit)) end
  return fmt("must be %s of at most %s", noun, plural(hi, unit))
end

local function number_noun(t)
  if t == "integer" then return "an integer" end
  if type(t) == "table" then
    local int, num = false, false
    for i = 1, #t do
      if t[i] == "integer" then int = true elseif t[i] == "number" then num = true end
    end
    if int and not num then return "an integer" end
  end
  return "a number"
end

local function bounds_message(s)
  local parts = {}
  if s.minimum ~= nil then parts[#parts + 1] = ">= " .. fmt_num(s.minimum) end
  if s.exclusiveMinimum ~= nil then parts[#parts + 1] = "> " .. fmt_num(s.exclusiveMinimum) end
  if s.maximum ~= nil then parts[#parts + 1] = "<= " .. fmt_num(s.maximum) end
  if s.exclusiveMaximum ~= nil then parts[#parts + 1] = "< " .. fmt_num(s.exclusiveMaximum) end
  return "must be " .. number_noun(s.type) .. " " .. concat(parts, " and ")
end

local function values_message(list)
  local parts, n = {}, #list
  for i = 1, n < 20 and n or 20 do parts[i] = display(list[i]) end
  local s = concat(parts, ", ")
  if n > 20 then s = s .. fmt(", ... (%d values)", n) end
  if n == 1 then return "must be " .. s end
  return "must be one of " .. s
end

---------------------------------------------------------------------------
-- Paths (built only on failure: the walker returns the keys innermost first)
---------------------------------------------------------------------------

local function format_path(p, root)
  local n = p and #p or 0
  if n == 0 then return root end
  local parts = {}
  for i = n, 1, -1 do
    local k = p[i]
    if math_type(k) == "integer" then
      parts[#parts + 1] = "[" .. k .. "]"
    elseif type(k) == "string" and find(k, "^[%a_$][%w_$]*$") then
      parts[#parts + 1] = i == n and k or "." .. k
    else
      parts[#parts + 1] = "[" .. (type(k) == "string" and quote(k) or tostring(k)) .. "]"
    end
  end
  local s = concat(parts)
  if byte(s, 1) == 91 then s = root .. s end   -- "[": anchor on the root name
  return s
end

M.json_array, M.json_null = json_array, json_null
M.TYPES, M.TYPE_ORDER, M.NOUNS = TYPES, TYPE_ORDER, NOUNS
M.kind_of, M.is_finite, M.type_is, M.fmt_num, M.quote, M.display = kind_of, is_finite, type_is, fmt_num, quote, display
M.got_desc, M.join_words, M.type_list, M.type_message, M.deep_equal = got_desc, join_words, type_list, type_message,
  deep_equal
M.plural, M.size_message, M.number_noun, M.bounds_message, M.values_message = plural, size_message, number_noun,
  bounds_message, values_message
M.format_path = format_path

return M
