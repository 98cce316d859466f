--- Every tunable of moor's Lua side, in one place (as Lua's luaconf.h; the C
-- host's are in host/moorconf.h). Each is read where it is used, through
-- this table, so a spec may change one for a while (engine.MAX_RESULT = ...
-- writes here) and restore it.
local core = require "moor.core" -- (moorconf.h's defaults the Lua side shares: core.default_port)

local M = {}

-- The largest step result, model answer, tool result or progress snapshot, as
-- JSON: 16 MiB, or $MOOR_MAX_RESULT (bytes, or with a KiB / MiB suffix).
local function max_result(env)
  if env == nil or env == "" then return 16 * 1024 * 1024 end
  local n, unit = env:match("^%s*(%d+)%s*(%a*)%s*$")
  local scale = ({ [""] = 1, b = 1, k = 1024, kib = 1024, m = 1024 * 1024, mib = 1024 * 1024 })[
    unit and unit:lower() or ""]
  n = n and math.tointeger(tonumber(n))
  if not n or not scale or n * scale < 1024 then
    error(("MOOR_MAX_RESULT must be a size of at least 1024 bytes, as 16777216 or 16MiB, not '%s'"):format(env), 0)
  end
  return n * scale
end

M.MAX_RESULT = max_result(os.getenv("MOOR_MAX_RESULT")) -- bytes of JSON a result, answer or snapshot may hold

-- sign-in inside a step (lua/moor/engine/auth.lua, lua/moor/auth/)
M.AUTH_TTL = 15 * 60000                -- ms a sign-in link stays valid (authorization.expiresAt)
M.callback_url = false                 -- where providers return (".../v1/auth/callback"); set by moor dev
M.tokens_path = false                  -- the token file ($MOOR_TOKENS, else tokens.json beside the database)

-- harness agents (lua/moor/harness/; the launcher's limits are moor.harness.teach's LIMITS)
M.HARNESS_TOOL_MAX_RESULT = 64 * 1024  -- bytes of a harness tool's result as JSON (seed 001)
M.HARNESS_TURN_TIMEOUT = 30 * 60000    -- ms: a turn's deadline when agent:run names no timeout
M.HARNESS_EXIT_GRACE = 10000           -- ms a harness may take to exit after its answer was accepted
M.MAX_DURATION = (1 << 53) - 1        -- ms: the longest sleep, timer or backoff (due = now + it stays exact)
M.CANCEL_GRACE = 30000                -- ms a cancelled run's cleanup may take before it ends as cancelled
M.DEFAULT_PORT = core.default_port    -- moor dev's port when --listen names none (MOOR_DEFAULT_PORT, host/moorconf.h)
-- The base of the URLs moor hands out (webhooks; sign-in callbacks under moor
-- dev): $MOOR_PUBLIC_URL (--public-url) when it is an http(s) origin, else
-- moor dev's default address; moor dev sets it to where it serves when no
-- public URL is set, and refuses a malformed one (moor.host serving).
local function public_url(env)
  if env and env:match("^https?://[^/?#%s]+/?$") then return (env:gsub("/$", "")) end
end
M.public_url = public_url(os.getenv("MOOR_PUBLIC_URL")) or "http://127.0.0.1:" .. M.DEFAULT_PORT
M.MAX_QUEUED = 1000                   -- deliveries queued per hook or webhook token, not yet taken by its run
M.MAX_QUEUED_BYTES = 4 * 1024 * 1024  -- bytes of queued delivery payloads per token
M.MAX_DELIVERY = 1024 * 1024 + 65536  -- bytes of one delivery's payload as JSON (a 1 MiB body plus headers)
-- Eviction (lua/moor/engine/evict.lua): a run parked this long, or any parked run beyond MAX_PARKED_LIVE
-- runs in memory (least recently active first), leaves memory and is replayed from its log when its timer
-- falls due or the world reaches it. EVICT_IDLE_MS < 0 turns eviction off.
local function env_int(name, default)
  local v = os.getenv(name)
  if v == nil or v == "" then return default end
  local n = math.tointeger(tonumber(v))
  if not n then error(("%s must be an integer, not '%s'"):format(name, v), 0) end
  return n
end
M.EVICT_IDLE_MS = env_int("MOOR_EVICT_IDLE_MS", 30000) -- ms parked before a run is evicted ($MOOR_EVICT_IDLE_MS)
M.MAX_PARKED_LIVE = env_int("MOOR_MAX_PARKED_LIVE", 10000) -- runs in memory beyond which parked ones are evicted
M.EVICT_BATCH = 1024                  -- runs a scheduler round looks at for eviction, at most
M.EVICT_SLICE_US = env_int("MOOR_EVICT_SLICE_US", 20) -- µs an unbudgeted round may spend evicting (one at least)
M.evict_rounds = false                -- tick's due includes the next eviction (moor dev sets it: it serves)
-- The collector under a budgeted tick (lua/moor/engine/gc.lua): held during the round, it works at the
-- round's end in slices; percentages are of the heap after the last cycle, as Lua's own pause.
M.GC_PAUSE = 200                      -- % of the heap after the last cycle at which the next is due
M.GC_LIMIT = 400                      -- % past which a round finishes the cycle whatever its budget
M.GC_SHARE = 0.25                     -- part of a round's budget kept for the collector while a cycle is due
M.GC_STEPSIZE = 5                     -- log2 bytes of work a slice does (some 5-30 us)
M.GC_STEPSIZE_AUTO = 13               -- log2 bytes of the automatic collector's steps (Lua 5.4's own)
-- open SSE streams per run (429 beyond): a client cannot pin the host with streams
M.MAX_STREAMS_PER_RUN = math.tointeger(tonumber(os.getenv("MOOR_MAX_STREAMS_PER_RUN") or "")) or 0
if M.MAX_STREAMS_PER_RUN <= 0 then M.MAX_STREAMS_PER_RUN = 32 end -- 0 or a non-positive value: the default
-- MCP sessions moor dev holds at /mcp (lua/moor/mcp/http.lua): past it, the least recently used one with
-- no open stream is ended to make room ($MOOR_MCP_MAX_SESSIONS; 0 or unset: 256)
M.MCP_MAX_SESSIONS = math.tointeger(tonumber(os.getenv("MOOR_MCP_MAX_SESSIONS") or "")) or 0
if M.MCP_MAX_SESSIONS <= 0 then M.MCP_MAX_SESSIONS = 256 end
-- a step's retry policy when moor.step is given none: 3 retries, 1 s doubling up to 60 s
M.STEP_WORKERS = 64                     -- step coroutines kept for the next step (engine/steps.lua)
M.STEP_POLICY = { retries = 3, backoff = 1000, factor = 2, maxBackoff = 60000 }
M.CONTENT_WARN_BYTES = 3 * 1024 * 1024 -- content parts a tool sends the model above which a warning is logged
M.SESSION_DEPTH = 64                   -- parent links followed from a run to its outermost session
M.MAX_TASKS = 32                       -- working tasks a session holds at once (seed 000: TOO_MANY_TASKS beyond)
M.TASK_WAIT = 300000                   -- ms moor__task_wait waits when the model gives no timeoutSeconds
M.MAX_STEPS = 20                       -- model steps a session's turn takes when the agent sets no maxSteps

-- model providers (lua/moor/providers/)
M.MODEL_TIMEOUT = 120000               -- ms per model HTTP request when the agent sets no modelTimeout
M.MODEL_RETRIES = 3                    -- retries of a failed model request after the first attempt
M.MODEL_TIMEOUT_RETRIES = 1            -- of which at most this many after a timeout
M.MODEL_BACKOFF = 1000                 -- ms before the first retry, doubling: 1 s, 2 s, 4 s, ...
M.MODEL_BACKOFF_CAP = 30000            -- ms: the longest backoff between retries
M.MODEL_MAX_RETRY_AFTER = 60000        -- ms: a longer retry-after is handed to the caller (err.retryAfter)
M.ERROR_EXCERPT = 200                  -- bytes of a server's body quoted in an error
M.ANTHROPIC_MAX_TOKENS = 4096          -- max_tokens of an Anthropic request that names none

return M
