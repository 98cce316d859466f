-- moor.regex: a small backtracking matcher for the ECMA-262 subset that JSON
-- Schema `pattern` uses in practice. Patterns compile to a tiny VM program
-- (split/jump/char/class) run with an explicit backtrack stack, so long
-- subjects cannot overflow the Lua stack, and a step budget turns
-- catastrophic backtracking into a reported failure instead of a hang.
-- Matching works on UTF-8 code points, as ECMA `.` and `{n}` count characters.

local byte, sub = string.byte, string.sub
local utf8_char, utf8_codes = utf8.char, utf8.codes
local huge = math.huge
local pcall, error, type, setmetatable = pcall, error, type, setmetatable

local M = {}

M.DEFAULT_BUDGET = 100000
M.BUDGET_PER_BYTE = 100       -- long subjects legitimately need more steps
local MAX_PROGRAM = 10000     -- instructions; bounds `{n,m}` expansion
local MAX_COUNT = 1000000000  -- clamp for quantifier numbers while parsing

-- opcodes
local OP_BYTE, OP_STR, OP_CLASS, OP_SPLIT, OP_JMP, OP_MATCH = 1, 2, 3, 4, 5, 6
local OP_BOL, OP_EOL, OP_WORDB, OP_NWORDB, OP_MARK, OP_PROGRESS = 7, 8, 9, 10, 11, 12

-- code points of the syntax characters
local C_PIPE, C_STAR, C_PLUS, C_QMARK, C_DOT = 124, 42, 43, 63, 46
local C_CARET, C_DOLLAR, C_BSLASH, C_MINUS, C_COMMA = 94, 36, 92, 45, 44
local C_LPAREN, C_RPAREN, C_LBRACK, C_RBRACK, C_LBRACE, C_RBRACE = 40, 41, 91, 93, 123, 125
local C_COLON, C_EQUALS, C_BANG, C_LT, C_GT = 58, 61, 33, 60, 62

-- flat {lo, hi, lo, hi, ...} code point ranges
local DIGIT = { 48, 57 }
local WORD = { 48, 57, 65, 90, 95, 95, 97, 122 }
local SPACE = { 9, 13, 32, 32, 0xA0, 0xA0, 0x1680, 0x1680, 0x2000, 0x200A,
  0x2028, 0x2029, 0x202F, 0x202F, 0x205F, 0x205F, 0x3000, 0x3000, 0xFEFF, 0xFEFF }
local LINE_TERM = { 10, 10, 13, 13, 0x2028, 0x2029 }

local function in_ranges(r, c)
  for k = 1, #r, 2 do
    if c >= r[k] and c <= r[k + 1] then return true end
  end
  return false
end

-- A class is { neg = bool, ranges = flat ranges, sets = { negated sets } };
-- negated escapes inside a class ([^\W\d]) cannot be folded into ranges.
local function class_has(cls, c)
  local hit = in_ranges(cls.ranges, c)
  if not hit then
    local sets = cls.sets
    for k = 1, #sets do
      if not in_ranges(sets[k].ranges, c) then hit = true; break end
    end
  end
  if cls.neg then return not hit end
  return hit
end

-- ASCII lookup table so the common case is one index, not a range scan.
local function finish_class(cls)
  local ascii = {}
  for b = 0, 127 do
    if class_has(cls, b) then ascii[b] = true end
  end
  cls.ascii = ascii
  return cls
end

local function escape_class(ranges, neg)
  return finish_class({ neg = neg, ranges = ranges, sets = {} })
end

local DOT_CLASS = escape_class(LINE_TERM, true)

-- Decode the code point at byte i (i <= #s). Invalid bytes become code points
-- above U+10FFFF so they never equal a real character but `.` still eats them.
local function decode(s, i)
  local b = byte(s, i)
  if b < 0x80 then return b, i + 1 end
  if b >= 0xC2 and b < 0xE0 then
    local b2 = byte(s, i + 1)
    if b2 and b2 >= 0x80 and b2 < 0xC0 then
      return (b - 0xC0) * 64 + (b2 - 0x80), i + 2
    end
  elseif b >= 0xE0 and b < 0xF0 then
    local b2, b3 = byte(s, i + 1, i + 2)
    if b3 and b2 >= 0x80 and b2 < 0xC0 and b3 >= 0x80 and b3 < 0xC0 then
      local c = ((b - 0xE0) * 64 + (b2 - 0x80)) * 64 + (b3 - 0x80)
      if c >= 0x800 then return c, i + 3 end
    end
  elseif b >= 0xF0 and b < 0xF5 then
    local b2, b3, b4 = byte(s, i + 1, i + 3)
    if b4 and b2 >= 0x80 and b2 < 0xC0 and b3 >= 0x80 and b3 < 0xC0
        and b4 >= 0x80 and b4 < 0xC0 then
      local c = (((b - 0xF0) * 64 + (b2 - 0x80)) * 64 + (b3 - 0x80)) * 64 + (b4 - 0x80)
      if c >= 0x10000 and c <= 0x10FFFF then return c, i + 4 end
    end
  end
  return 0x110000 + b, i + 1
end

local function is_word_byte(b)
  return b ~= nil and ((b >= 48 and b <= 57) or (b >= 65 and b <= 90) or b == 95
    or (b >= 97 and b <= 122))
end

---------------------------------------------------------------------------
-- Parser: pattern -> AST
---------------------------------------------------------------------------

local function perr(msg)
  error({ regex_error = msg }, 0)
end

local function is_hex(c)
  return c ~= nil and ((c >= 48 and c <= 57) or (c >= 65 and c <= 70) or (c >= 97 and c <= 102))
end

local function parse(pattern)
  local cps = {}
  for _, c in utf8_codes(pattern) do cps[#cps + 1] = c end
  local pos, n = 1, #cps

  local function show(c)
    return c and utf8_char(c) or "end of pattern"
  end

  local function read_hex(count)
    local v = 0
    for _ = 1, count do
      local c = cps[pos]
      if not is_hex(c) then return nil end
      v = v * 16 + tonumber(utf8_char(c), 16)
      pos = pos + 1
    end
    return v
  end

  -- {n}, {n,}, {n,m} starting at p (a '{'); nil when not a quantifier, which
  -- makes the brace a literal as in ECMA-262 Annex B.
  local function try_braces(p)
    p = p + 1
    local function digits()
      local v, start = 0, p
      while cps[p] and cps[p] >= 48 and cps[p] <= 57 do
        v = v * 10 + (cps[p] - 48)
        if v > MAX_COUNT then v = MAX_COUNT end
        p = p + 1
      end
      if p == start then return nil end
      return v
    end
    local lo = digits()
    if not lo then return nil end
    local hi = lo
    if cps[p] == C_COMMA then
      p = p + 1
      hi = digits() or huge
    end
    if cps[p] ~= C_RBRACE then return nil end
    return lo, hi, p + 1
  end

  -- Returns a node: { t = "char", cp } or { t = "class", cls }.
  local function parse_escape(in_class)
    local c = cps[pos + 1]
    if c == nil then perr("\\ at end of pattern") end
    pos = pos + 2
    if c == 100 then return { t = "class", cls = escape_class(DIGIT, false) } end   -- d
    if c == 68 then return { t = "class", cls = escape_class(DIGIT, true) } end     -- D
    if c == 119 then return { t = "class", cls = escape_class(WORD, false) } end    -- w
    if c == 87 then return { t = "class", cls = escape_class(WORD, true) } end      -- W
    if c == 115 then return { t = "class", cls = escape_class(SPACE, false) } end   -- s
    if c == 83 then return { t = "class", cls = escape_class(SPACE, true) } end     -- S
    if c == 110 then return { t = "char", cp = 10 } end                             -- n
    if c == 114 then return { t = "char", cp = 13 } end                             -- r
    if c == 116 then return { t = "char", cp = 9 } end                              -- t
    if c == 118 then return { t = "char", cp = 11 } end                             -- v
    if c == 102 then return { t = "char", cp = 12 } end                             -- f
    if c == 98 and in_class then return { t = "char", cp = 8 } end                  -- [\b]
    if c == 48 then                                                                  -- 0
      local d = cps[pos]
      if d and d >= 48 and d <= 57 then perr("octal escapes are not supported") end
      return { t = "char", cp = 0 }
    end
    if c >= 49 and c <= 57 then perr("backreferences are not supported") end
    if c == 120 then                                                                 -- x
      local v = read_hex(2)
      if not v then perr("\\x must be followed by 2 hex digits") end
      return { t = "char", cp = v }
    end
    if c == 117 then                                                                 -- u
      local v
      if cps[pos] == C_LBRACE then
        pos = pos + 1
        v = 0
        local start = pos
        while is_hex(cps[pos]) do
          v = v * 16 + tonumber(utf8_char(cps[pos]), 16)
          if v > 0x10FFFF then perr("\\u{...} beyond U+10FFFF") end
          pos = pos + 1
        end
        if pos == start or cps[pos] ~= C_RBRACE then perr("malformed \\u{...} escape") end
        pos = pos + 1
      else
        v = read_hex(4)
        if not v then perr("\\u must be followed by 4 hex digits") end
        -- a UTF-16 surrogate pair written as two escapes is one character
        if v >= 0xD800 and v <= 0xDBFF and cps[pos] == C_BSLASH and cps[pos + 1] == 117 then
          local save = pos
          pos = pos + 2
          local lo = read_hex(4)
          if lo and lo >= 0xDC00 and lo <= 0xDFFF then
            v = 0x10000 + (v - 0xD800) * 0x400 + (lo - 0xDC00)
          else
            pos = save
          end
        end
      end
      return { t = "char", cp = v }
    end
    if c == 99 then                                                                  -- c
      local l = cps[pos]
      if l and ((l >= 65 and l <= 90) or (l >= 97 and l <= 122)) then
        pos = pos + 1
        return { t = "char", cp = l % 32 }
      end
      perr("\\c must be followed by a letter")
    end
    if c == 107 then perr("named backreferences are not supported") end            -- k
    if c == 112 or c == 80 then perr("unicode property escapes are not supported") end
    if (c >= 65 and c <= 90) or (c >= 97 and c <= 122) then
      perr("unknown escape \\" .. utf8_char(c))
    end
    return { t = "char", cp = c }   -- identity escape: \. \\ \- \/ ...
  end

  local function parse_class()
    pos = pos + 1
    local neg = false
    if cps[pos] == C_CARET then neg = true; pos = pos + 1 end
    local ranges, sets = {}, {}
    local function add(node)
      if node.t == "char" then
        ranges[#ranges + 1] = node.cp
        ranges[#ranges + 1] = node.cp
      elseif node.cls.neg then
        sets[#sets + 1] = node.cls
      else
        local r = node.cls.ranges
        for k = 1, #r do ranges[#ranges + 1] = r[k] end
      end
    end
    local function atom()
      if cps[pos] == C_BSLASH then return parse_escape(true) end
      pos = pos + 1
      return { t = "char", cp = cps[pos - 1] }
    end
    while true do
      local c = cps[pos]
      if c == nil then perr("missing ] to close character class") end
      if c == C_RBRACK then pos = pos + 1; break end
      local lo = atom()
      if cps[pos] == C_MINUS and cps[pos + 1] ~= nil and cps[pos + 1] ~= C_RBRACK then
        pos = pos + 1
        local hi = atom()
        if lo.t == "class" or hi.t == "class" then
          -- [\d-z]: Annex B reads the dash literally
          add(lo); add({ t = "char", cp = C_MINUS }); add(hi)
        else
          if lo.cp > hi.cp then
            perr("range out of order in character class: " .. utf8_char(lo.cp) .. "-" .. utf8_char(hi.cp))
          end
          ranges[#ranges + 1] = lo.cp
          ranges[#ranges + 1] = hi.cp
        end
      else
        add(lo)
      end
    end
    return { t = "class", cls = finish_class({ neg = neg, ranges = ranges, sets = sets }) }
  end

  local parse_disj

  local function parse_atom()
    local c = cps[pos]
    if c == C_DOT then
      pos = pos + 1
      return { t = "class", cls = DOT_CLASS }
    elseif c == C_LPAREN then
      pos = pos + 1
      if cps[pos] == C_QMARK then
        local k = cps[pos + 1]
        if k == C_COLON then
          pos = pos + 2
        elseif k == C_LT then          -- named group: (?<name>...)
          pos = pos + 2
          local start = pos
          while cps[pos] and cps[pos] ~= C_GT do pos = pos + 1 end
          if cps[pos] ~= C_GT or pos == start then perr("malformed group name") end
          pos = pos + 1
        else
          perr("unsupported group syntax (?" .. show(k))
        end
      end
      local body = parse_disj()
      if cps[pos] ~= C_RPAREN then perr("missing ) to close group") end
      pos = pos + 1
      return { t = "group", body = body }
    elseif c == C_LBRACK then
      return parse_class()
    elseif c == C_BSLASH then
      return parse_escape(false)
    elseif c == C_STAR or c == C_PLUS or c == C_QMARK then
      perr("nothing to repeat before " .. utf8_char(c))
    elseif c == C_LBRACE and try_braces(pos) then
      perr("nothing to repeat before {")
    end
    pos = pos + 1
    return { t = "char", cp = c }
  end

  local function parse_quant()
    local c = cps[pos]
    local lo, hi
    if c == C_STAR then lo, hi = 0, huge; pos = pos + 1
    elseif c == C_PLUS then lo, hi = 1, huge; pos = pos + 1
    elseif c == C_QMARK then lo, hi = 0, 1; pos = pos + 1
    elseif c == C_LBRACE then
      local a, b, p2 = try_braces(pos)
      if not a then return nil end
      if a > b then perr("numbers out of order in {" .. a .. "," .. b .. "}") end
      lo, hi, pos = a, b, p2
    else
      return nil
    end
    local lazy = false
    if cps[pos] == C_QMARK then lazy = true; pos = pos + 1 end
    return { t = "rep", min = lo, max = hi, lazy = lazy }
  end

  local function parse_term()
    local c = cps[pos]
    local node, assertion
    if c == C_CARET then
      pos = pos + 1; node, assertion = { t = "bol" }, true
    elseif c == C_DOLLAR then
      pos = pos + 1; node, assertion = { t = "eol" }, true
    elseif c == C_BSLASH and (cps[pos + 1] == 98 or cps[pos + 1] == 66) then
      node, assertion = { t = "wordb", neg = cps[pos + 1] == 66 }, true
      pos = pos + 2
    elseif c == C_LPAREN and cps[pos + 1] == C_QMARK then
      local k, k2 = cps[pos + 2], cps[pos + 3]
      if k == C_EQUALS or k == C_BANG then perr("lookahead is not supported") end
      if k == C_LT and (k2 == C_EQUALS or k2 == C_BANG) then perr("lookbehind is not supported") end
    end
    if not node then node = parse_atom() end
    local q = parse_quant()
    if q then
      if assertion then perr("nothing to repeat (quantifier after an assertion)") end
      q.body = node
      return q
    end
    return node
  end

  local function parse_alt()
    local items = {}
    while pos <= n do
      local c = cps[pos]
      if c == C_PIPE or c == C_RPAREN then break end
      items[#items + 1] = parse_term()
    end
    return { t = "seq", items = items }
  end

  function parse_disj()
    local alts = { parse_alt() }
    while cps[pos] == C_PIPE do
      pos = pos + 1
      alts[#alts + 1] = parse_alt()
    end
    if #alts == 1 then return alts[1] end
    return { t = "alt", alts = alts }
  end

  local ast = parse_disj()
  if pos <= n then perr("unmatched )") end
  return ast
end

---------------------------------------------------------------------------
-- Compiler: AST -> program (parallel arrays op/a/b)
---------------------------------------------------------------------------

local function nullable(node)
  local t = node.t
  if t == "char" or t == "class" then return false end
  if t == "bol" or t == "eol" or t == "wordb" then return true end
  if t == "group" then return nullable(node.body) end
  if t == "rep" then return node.min == 0 or nullable(node.body) end
  if t == "seq" then
    for _, it in ipairs(node.items) do
      if not nullable(it) then return false end
    end
    return true
  end
  for _, it in ipairs(node.alts) do   -- alt
    if nullable(it) then return true end
  end
  return false
end

local function gen_program(ast)
  local op, A, B = {}, {}, {}
  local count, nregs = 0, 0

  local function emit(o, x, y)
    count = count + 1
    if count > MAX_PROGRAM then perr("pattern too large (quantifier counts too big)") end
    op[count], A[count], B[count] = o, x or 0, y or 0
    return count
  end

  local gen
  function gen(node)
    local t = node.t
    if t == "char" then
      if node.cp < 128 then
        emit(OP_BYTE, node.cp)
      else
        local s = utf8_char(node.cp)
        emit(OP_STR, s, #s)
      end
    elseif t == "class" then
      emit(OP_CLASS, node.cls.ascii, node.cls)
    elseif t == "bol" then
      emit(OP_BOL)
    elseif t == "eol" then
      emit(OP_EOL)
    elseif t == "wordb" then
      emit(node.neg and OP_NWORDB or OP_WORDB)
    elseif t == "group" then
      gen(node.body)
    elseif t == "seq" then
      for _, it in ipairs(node.items) do gen(it) end
    elseif t == "alt" then
      local alts, jumps = node.alts, {}
      for k = 1, #alts - 1 do
        local split = emit(OP_SPLIT)
        A[split] = split + 1
        gen(alts[k])
        jumps[#jumps + 1] = emit(OP_JMP)
        B[split] = count + 1
      end
      gen(alts[#alts])
      for _, j in ipairs(jumps) do A[j] = count + 1 end
    else -- rep
      local body = node.body
      for _ = 1, node.min do gen(body) end
      if node.max == huge then
        local loop = emit(OP_SPLIT)
        -- an iteration that matches empty must not loop forever (ECMA's
        -- empty check); only bodies that can match empty pay for it
        local reg
        if nullable(body) then
          nregs = nregs + 1
          reg = nregs
          emit(OP_MARK, reg)
        end
        gen(body)
        if reg then emit(OP_PROGRESS, reg) end
        emit(OP_JMP, loop)
        local exit = count + 1
        if node.lazy then A[loop], B[loop] = exit, loop + 1
        else A[loop], B[loop] = loop + 1, exit end
      else
        local splits = {}
        for k = 1, node.max - node.min do
          splits[k] = emit(OP_SPLIT)
          gen(body)
        end
        local exit = count + 1
        for _, sp in ipairs(splits) do
          if node.lazy then A[sp], B[sp] = exit, sp + 1
          else A[sp], B[sp] = sp + 1, exit end
        end
      end
    end
  end

  gen(ast)
  emit(OP_MATCH)
  return op, A, B
end

local Regex = {}
Regex.__index = Regex

--- Compile an ECMA-262 pattern. Returns a regex object, or nil and a message.
function M.compile(pattern)
  if type(pattern) ~= "string" then
    error("regex.compile: pattern must be a string, got " .. type(pattern), 2)
  end
  local ok, res = pcall(parse, pattern)
  if not ok then
    if type(res) == "table" and res.regex_error then return nil, res.regex_error end
    if type(res) == "string" and res:find("invalid UTF%-8") then
      return nil, "pattern is not valid UTF-8"
    end
    error(res, 0)
  end
  local ast = res
  local ok2, op, A, B = pcall(gen_program, ast)
  if not ok2 then
    if type(op) == "table" and op.regex_error then return nil, op.regex_error end
    error(op, 0)
  end
  local anchored = ast.t == "seq" and ast.items[1] ~= nil and ast.items[1].t == "bol"
  return setmetatable({ source = pattern, op = op, a = A, b = B, anchored = anchored }, Regex)
end

-- Shared scratch stacks: matching never yields or re-enters, so one set is enough.
local stk_pc, stk_i, regs = {}, {}, {}

-- Run the program anchored at byte `start`. Returns end byte (exclusive) or
-- false, and the steps used; nil end when the budget ran out.
local function run(op, A, B, s, len, start, steps, budget)
  local pc, i, sp = 1, start, 0
  while true do
    steps = steps + 1
    if steps > budget then return nil, steps end
    local o = op[pc]
    local ok = true
    if o == OP_BYTE then
      if byte(s, i) == A[pc] then i = i + 1; pc = pc + 1 else ok = false end
    elseif o == OP_CLASS then
      local b = byte(s, i)
      if b == nil then
        ok = false
      elseif b < 128 then
        if A[pc][b] then i = i + 1; pc = pc + 1 else ok = false end
      else
        local c, ni = decode(s, i)
        if class_has(B[pc], c) then i = ni; pc = pc + 1 else ok = false end
      end
    elseif o == OP_SPLIT then
      sp = sp + 1
      stk_pc[sp], stk_i[sp] = B[pc], i
      pc = A[pc]
    elseif o == OP_JMP then
      pc = A[pc]
    elseif o == OP_MATCH then
      return i, steps
    elseif o == OP_STR then
      local m = B[pc]
      if sub(s, i, i + m - 1) == A[pc] then i = i + m; pc = pc + 1 else ok = false end
    elseif o == OP_BOL then
      if i == 1 then pc = pc + 1 else ok = false end
    elseif o == OP_EOL then
      if i == len + 1 then pc = pc + 1 else ok = false end
    elseif o == OP_WORDB or o == OP_NWORDB then
      -- byte(s, 0) would read byte 1, so the start of input is special
      local before = i > 1 and is_word_byte(byte(s, i - 1))
      local at = before ~= is_word_byte(byte(s, i))
      if at == (o == OP_WORDB) then pc = pc + 1 else ok = false end
    elseif o == OP_MARK then
      local r = A[pc]
      sp = sp + 1
      stk_pc[sp], stk_i[sp] = -r, regs[r] or 0   -- undo record
      regs[r] = i
      pc = pc + 1
    else -- OP_PROGRESS
      if regs[A[pc]] == i then ok = false else pc = pc + 1 end
    end
    if not ok then
      while true do
        if sp == 0 then return false, steps end
        local p, si = stk_pc[sp], stk_i[sp]
        sp = sp - 1
        if p < 0 then
          regs[-p] = si
        else
          pc, i = p, si
          break
        end
      end
    end
  end
end

--- Search s for the pattern (unanchored unless the pattern uses ^).
-- Returns start, stop (byte offsets, inclusive) on a match, false when there
-- is none, or nil, "too expensive" when the step budget ran out.
function M.exec(re, s, budget)
  local len = #s
  budget = budget or (M.DEFAULT_BUDGET + M.BUDGET_PER_BYTE * len)
  local op, A, B = re.op, re.a, re.b
  local steps, start = 0, 1
  while start <= len + 1 do
    local stop
    stop, steps = run(op, A, B, s, len, start, steps, budget)
    if stop then return start, stop - 1 end
    if stop == nil then return nil, "too expensive" end
    if re.anchored then break end
    start = start + 1
    -- next code point boundary: skip UTF-8 continuation bytes
    while start <= len do
      local b = byte(s, start)
      if b < 0x80 or b >= 0xC0 then break end
      start = start + 1
    end
  end
  return false
end

--- true when the pattern matches somewhere in s, false when it does not,
-- nil, "too expensive" when the step budget ran out.
function M.test(re, s, budget)
  local a, err = M.exec(re, s, budget)
  if a == nil then return nil, err end
  return a ~= false
end

Regex.exec = M.exec
Regex.test = M.test

return M
