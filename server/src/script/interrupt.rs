//! Stopping a running script (SCRIPT KILL, SHUTDOWN NOSAVE, SIGTERM).
//!
//! An instruction-count hook checks the kill flag of the script running on this
//! thread and raises SCRIPT KILL's error. It is installed with the C API rather
//! than mlua's `set_hook`, because mlua hooks one Lua thread at a time and drops
//! the hook from any other: a loop inside a coroutine would never be stopped.
//! Set on the main state, the hook is inherited by every coroutine created from
//! it, as in Redis. The flag lives in a thread local because a Lua state, like
//! the script it runs, never leaves its thread.

use std::cell::RefCell;
use std::sync::atomic::Ordering::Relaxed;
use std::sync::Arc;

use mlua::{ffi, Lua};

use super::Running;

/// How often (in Lua instructions) a running script checks whether it was killed.
const HOOK_EVERY: i32 = 10_000;

/// What the hook raises once SCRIPT KILL asked.
pub(super) const KILLED: &str = "ERR Script killed by user with SCRIPT KILL...";

thread_local! {
    static CURRENT: RefCell<Option<Arc<Running>>> = const { RefCell::new(None) };
}

/// Whether the script running on this thread was asked to stop.
pub(super) fn killed() -> bool {
    CURRENT.with(|c| c.borrow().as_ref().is_some_and(|r| r.killed.load(Relaxed)))
}

/// Marks `running` as the script on this thread until the guard drops.
pub(super) fn enter(running: Arc<Running>) -> Entered {
    CURRENT.with(|c| *c.borrow_mut() = Some(running));
    Entered
}

pub(super) struct Entered;

impl Drop for Entered {
    fn drop(&mut self) {
        CURRENT.with(|c| *c.borrow_mut() = None);
    }
}

/// Installs the hook on a new state's main thread.
pub(super) fn install(lua: &Lua) -> mlua::Result<()> {
    // SAFETY: the state pointer is live for the call; setting a hook touches no
    // Lua stack.
    unsafe {
        lua.exec_raw::<()>((), |state| {
            ffi::lua_sethook(state, Some(hook), ffi::LUA_MASKCOUNT, HOOK_EVERY);
        })
    }
}

unsafe extern "C-unwind" fn hook(state: *mut ffi::lua_State, _: *mut ffi::lua_Debug) {
    // Nothing with a destructor is alive when `lua_error` unwinds this frame.
    if killed() {
        // SAFETY: a hook runs with a valid state and room for one value; the
        // error unwinds to the script's protected call, as any Lua error does.
        unsafe {
            ffi::lua_pushlstring(state, KILLED.as_ptr().cast(), KILLED.len());
            ffi::lua_error(state);
        }
    }
}
