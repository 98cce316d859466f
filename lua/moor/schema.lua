-- moor.schema: build JSON Schema tables (the same tables go to LLM providers)
-- and validate decoded JSON values against them with short, path-qualified
-- messages an author or a model can act on.
--
-- Schemas are plain tables; a schema is treated as immutable once it has been
-- used for validation (per-schema lookups are cached in weak tables).

local core = require "moor.core"

local type, pairs, next, tostring, error, getmetatable, setmetatable =
  type, pairs, next, tostring, error, getmetatable, setmetatable
local math_type, floor = math.type, math.floor
local utf8_len = utf8.len
local concat, sort = table.concat, table.sort
local fmt, find, byte, lower, gsub = string.format, string.find, string.byte, string.lower, string.gsub

local M = {}

local ok_json, json = pcall(require, "moor.json")
if not ok_json or type(json) ~= "table" then json = nil end
local json_array_fn = json and json.array or function(t) return t end
local json_null = json and json.null

-- moor.json.array marks a table so `{}` encodes as `[]`; keep the table even if
-- the marker function returns nothing.
local function json_array(t)
  local r = json_array_fn(t)
  if r == nil then return t end
  return r
end

-- Optional markers live outside the schema so it stays pure JSON Schema.
local optional_set = setmetatable({}, { __mode = "k" })

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

---------------------------------------------------------------------------
-- Patterns: ECMA-262 regular expressions on PCRE2 (host/regex.c), compiled
-- once per pattern string and cached. Patterns come from schemas, so the set is
-- small; the cap only guards against a caller that generates schemas endlessly.
---------------------------------------------------------------------------

local regex_compile = core.regex_compile
local regex_cache, regex_count = {}, 0

-- compile_regex(pattern) -> compiled | nil, PCRE2's message
local function compile_regex(pattern)
  local re = regex_cache[pattern]
  if re then return re end
  local err
  re, err = regex_compile(pattern)
  if not re then return nil, err end
  if regex_count >= 1000 then regex_cache, regex_count = {}, 0 end
  regex_cache[pattern] = re
  regex_count = regex_count + 1
  return re
end

local function get_regex(pattern)
  local re, err = compile_regex(pattern)
  if not re then
    error(fmt("moor.schema: invalid pattern /%s/: %s", pattern, err), 0)
  end
  return re
end

-- A match that hit PCRE2's limits (host/regex.c) refuses the whole value, even
-- inside anyOf/oneOf where a failed branch could otherwise let it through:
-- validation fails closed. walk() records the pattern here; validate() reads it.
local costly_pattern

local function costly_message(pat)
  return "is too costly to check against the pattern /" .. pat ..
    "/ (it hit the match limit), so it was refused; send a shorter or simpler value"
end

---------------------------------------------------------------------------
-- Validation
---------------------------------------------------------------------------

-- Per-object-schema facts: property names sorted (deterministic first error)
-- and the required set.
local object_info = setmetatable({}, { __mode = "k" })

local function get_object_info(s)
  local info = object_info[s]
  if info then return info end
  local props, req = s.properties, s.required
  local names, req_set, extra_req = {}, {}, {}
  if props then
    for k in pairs(props) do names[#names + 1] = k end
    sort(names)
  end
  if req then
    for i = 1, #req do
      req_set[req[i]] = true
      if not (props and props[req[i]] ~= nil) then extra_req[#extra_req + 1] = req[i] end
    end
  end
  info = { names = names, req = req_set, extra_req = extra_req }
  object_info[s] = info
  return info
end

-- walk(s, v, quiet) returns nil when v is valid. On failure it returns what,
-- path, types: `what` the message without path (true when quiet), `path` the
-- keys innermost first (nil when quiet), `types` the expected type names when
-- the failure is a type mismatch at this very node (lets anyOf merge them).
local walk

local function fail(quiet, what)
  if quiet then return true end
  return what, {}
end

local function fail_at(quiet, what, key)
  if quiet then return true end
  return what, { key }
end

local function same_path(a, b)
  for i = 1, #a do
    if a[i] ~= b[i] then return false end
  end
  return true
end

local function explain_none(list, v)
  local kind = kind_of(v)
  local types, seen, all_type = {}, {}, true
  local best_w, best_p, best_depth, level = nil, nil, -1, nil
  for i = 1, #list do
    local w, p, ty = walk(list[i], v, false)
    if w then
      if ty then
        for j = 1, #ty do
          if not seen[ty[j]] then seen[ty[j]] = true; types[#types + 1] = ty[j] end
        end
      else
        all_type = false
        local d = #p
        if d > best_depth then
          best_w, best_p, best_depth = w, p, d
          level = { w }
        elseif d == best_depth and same_path(p, best_p) then
          -- several alternatives fail at the same spot: say what each wants
          local dup = false
          for j = 1, #level do if level[j] == w then dup = true end end
          if not dup then level[#level + 1] = w end
        end
      end
    end
  end
  if all_type then
    return type_message(types, v, kind), {}, types
  end
  if #level > 1 then
    return concat(level, "; or "), best_p
  end
  return best_w, best_p
end

local function walk_object(s, v, quiet)
  local props = s.properties
  if props or s.required then
    local info = get_object_info(s)
    local names, req = info.names, info.req
    for i = 1, #names do
      local name = names[i]
      local pv = v[name]
      if pv == nil then
        if req[name] then return fail_at(quiet, "is required", name) end
      else
        local w, p = walk(props[name], pv, quiet)
        if w then
          if p then p[#p + 1] = name end
          return w, p
        end
      end
    end
    local extra = info.extra_req
    for i = 1, #extra do
      if v[extra[i]] == nil then return fail_at(quiet, "is required", extra[i]) end
    end
  end
  local ap = s.additionalProperties
  if ap ~= nil and ap ~= true then
    local bad
    for k, pv in pairs(v) do
      if not (props and props[k] ~= nil) and (ap == false or walk(ap, pv, true)) then
        bad = true
        break
      end
    end
    if bad then
      if quiet then return true end
      -- report the first offending key in sorted order, not pairs order
      local keys = {}
      for k in pairs(v) do
        if not (props and props[k] ~= nil) then keys[#keys + 1] = k end
      end
      sort(keys, function(a, b) return tostring(a) < tostring(b) end)
      for _, k in ipairs(keys) do
        if ap == false then
          local names = props and get_object_info(s).names or {}
          local what = "is not allowed"
          if #names > 0 then
            local shown = {}
            for i = 1, #names < 10 and #names or 10 do shown[i] = names[i] end
            what = what .. " (allowed: " .. concat(shown, ", ") .. (#names > 10 and ", ..." or "") .. ")"
          end
          return what, { k }
        end
        local w, p = walk(ap, v[k], false)
        if w then
          p[#p + 1] = k
          return w, p
        end
      end
    end
  end
  return nil
end

function walk(s, v, quiet)
  if s == true then return nil end
  if s == false then return fail(quiet, "is not allowed") end
  local kind = kind_of(v)

  local t = s.type
  if t ~= nil then
    local ok
    if type(t) == "string" then
      ok = type_is(t, v, kind)
    else
      ok = false
      for i = 1, #t do
        if type_is(t[i], v, kind) then ok = true; break end
      end
    end
    if not ok then
      if quiet then return true end
      local types = type_list(t)
      return type_message(types, v, kind), {}, types
    end
  end

  local c = s.const
  if c ~= nil and c ~= v and not deep_equal(c, v) then
    return fail(quiet, "must be " .. display(c))
  end

  local en = s.enum
  if en ~= nil then
    local found = false
    for i = 1, #en do
      local e = en[i]
      if e == v or (type(e) == "table" and deep_equal(e, v)) then found = true; break end
    end
    if not found then
      if quiet then return true end
      return values_message(en), {}
    end
  end

  if kind == "string" then
    local lo, hi = s.minLength, s.maxLength
    if lo or hi then
      local n = utf8_len(v)
      if not n then return fail(quiet, "must be valid UTF-8") end
      if (lo and n < lo) or (hi and n > hi) then
        return fail(quiet, size_message("a string", "character", lo, hi))
      end
    end
    local pat = s.pattern
    if pat then
      local r = get_regex(pat):test(v)
      if not r then
        if r == nil then costly_pattern = costly_pattern or pat end
        if quiet then return true end
        if r == nil then return costly_message(pat), {} end
        return "must be a string matching /" .. pat .. "/", {}
      end
    end
  elseif kind == "integer" or kind == "number" then
    local lo, hi, elo, ehi = s.minimum, s.maximum, s.exclusiveMinimum, s.exclusiveMaximum
    if (lo and v < lo) or (hi and v > hi) or (elo and v <= elo) or (ehi and v >= ehi) then
      return fail(quiet, bounds_message(s))
    end
  elseif kind == "array" or kind == "object" or kind == "empty" then
    if kind ~= "object" then
      local n = kind == "empty" and 0 or #v
      local lo, hi = s.minItems, s.maxItems
      if (lo and n < lo) or (hi and n > hi) then
        return fail(quiet, size_message("an array", "item", lo, hi))
      end
      local items = s.items
      if items ~= nil then
        for i = 1, n do
          local w, p = walk(items, v[i], quiet)
          if w then
            if p then p[#p + 1] = i end
            return w, p
          end
        end
      end
    end
    if kind ~= "array" then
      local w, p = walk_object(s, v, quiet)
      if w then return w, p end
    end
  end

  local all = s.allOf
  if all then
    for i = 1, #all do
      local w, p, ty = walk(all[i], v, quiet)
      if w then return w, p, ty end
    end
  end

  local any = s.anyOf
  if any then
    local matched = false
    for i = 1, #any do
      if not walk(any[i], v, true) then matched = true; break end
    end
    if not matched then
      if quiet then return true end
      return explain_none(any, v)
    end
  end

  local one = s.oneOf
  if one then
    local count, first, second = 0, nil, nil
    for i = 1, #one do
      if not walk(one[i], v, true) then
        count = count + 1
        if count == 1 then first = i else second = i; break end
      end
    end
    if count == 0 then
      if quiet then return true end
      return explain_none(one, v)
    end
    if count > 1 then
      return fail(quiet, fmt("must match exactly one oneOf alternative, but matches #%d and #%d",
        first, second))
    end
  end

  return nil
end

--- Validate a decoded JSON value.
-- validate(s, value [, root]) -> true | nil, "<path>: <what>", path
function M.validate(s, value, root)
  if s ~= true and s ~= false and type(s) ~= "table" then
    error("schema.validate: schema must be a table or boolean, got " .. type(s), 2)
  end
  costly_pattern = nil
  local w, p = walk(s, value, false)
  if not w then
    local pat = costly_pattern
    if not pat then return true end
    costly_pattern = nil
    local path = format_path({}, root or "input")
    return nil, path .. ": " .. costly_message(pat), path
  end
  costly_pattern = nil
  local path = format_path(p, root or "input")
  return nil, path .. ": " .. w, path
end

---------------------------------------------------------------------------
-- Checking schemas themselves
---------------------------------------------------------------------------

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
    if lo ~= nil then
      for _, h in ipairs(highs) do
        local hi = s[h[1]]
        if hi ~= nil and (lo > hi or (lo == hi and (l[2] == ">" or h[2] == "<"))) then
          return fmt("no number is %s %s and %s %s", l[2], fmt_num(lo), h[2], fmt_num(hi)), { l[1] }
        end
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

---------------------------------------------------------------------------
-- Builders
---------------------------------------------------------------------------

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
  local ok, msg = M.check(s)
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
