--- moor.harness.dirs: where harness agents' launchers and sockets live
-- (issue 11): a root that can be traversed but not listed (0300), and per
-- agent a directory with an unguessable name (0700) holding the launcher
-- `wfa` (0500) and the socket `s` (0600, made by core.unix_listen).
local core = require "moor.core"
local conf = require "moor.conf"
local base64url = require "moor.base64url"

local M = {}

local root = nil -- the root, once made

--- A fresh directory name for an agent (16 random bytes, 22 characters).
function M.new_name() return base64url.encode(core.random_bytes(16)) end

local SUN_PATH = 107 -- bytes of a Unix socket's path (sockaddr_un)

local function make_root(path)
  local okm, err, errno = core.mkdir(path, tonumber("300", 8))
  if not okm and errno ~= 17 then return nil, err end -- (17: EEXIST)
  local okc, cerr = core.chmod(path, tonumber("300", 8))
  if not okc then return nil, cerr end
  return path
end

--- The root every agent's directory is in: $MOOR_HARNESS_DIR, else `h`
-- beside the database (.moor/h), else (a path too long for a socket) a new
-- directory under $TMPDIR or /tmp. Made 0300 (owner: write and search only).
function M.root()
  if root then return root end
  local want = os.getenv("MOOR_HARNESS_DIR")
  if want == nil or want == "" then
    local db = core.db_path and core.db_path() or conf.db_path or ".moor/moor.db"
    local dir = db:match("^(.*)/[^/]*$") or "."
    local abs = core.realpath(dir)
    want = abs and (abs .. "/h") or nil
    if want and #want + 26 > SUN_PATH then want = nil end
  end
  if want then
    local got, err = make_root(want)
    if not got then return nil, "cannot make the harness agents' directory: " .. err end
    root = core.realpath(got) or got
    return root
  end
  local tmp = os.getenv("TMPDIR")
  if not tmp or tmp == "" or #tmp + 40 > SUN_PATH then tmp = "/tmp" end
  for _ = 1, 8 do
    local path = tmp .. "/moor-h-" .. M.new_name():sub(1, 12)
    local okm = core.mkdir(path, tonumber("300", 8))
    if okm then
      root = path
      return root
    end
  end
  return nil, "cannot make a harness agents' directory under " .. tmp
end

local function shq(s) return "'" .. s:gsub("'", "'\\''") .. "'" end

--- Write the launcher `wfa` (0500): a shell script that execs moor-wfa with
-- the agent's socket and the names of its tools taught as JSON.
function M.write_launcher(path, socket, json_tools)
  local wfa, err = core.wfa_path()
  if not wfa then return nil, err or "the launcher program moor-wfa is not found (set $MOOR_WFA)" end
  local f, ferr = io.open(path, "w")
  if not f then return nil, ferr end
  f:write("#!/bin/sh\n", "exec ", shq(wfa), " ", shq(socket), " ", shq(json_tools), ' "$@"\n')
  f:close()
  return core.chmod(path, tonumber("500", 8))
end

--- Remove an agent's directory: its socket, its launcher, itself.
function M.remove(path)
  os.remove(path .. "/s")
  core.chmod(path .. "/wfa", tonumber("700", 8))
  os.remove(path .. "/wfa")
  core.rmdir(path)
end

return M
