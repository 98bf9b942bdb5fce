//! Stopping a running script (SCRIPT KILL, SHUTDOWN NOSAVE, SIGTERM), and
//! letting the other clients of its loop go on while it runs long.
//!
//! An instruction-count hook checks the kill flag of the script running on this
//! thread and raises SCRIPT KILL's error. A script starts on its connection's
//! loop, as a command does; once it has run [`STEP_ASIDE_AFTER_NS`], the hook hands
//! the loop to another thread (`evloop::hand_over`), which serves the loop's other
//! clients while this one finishes the script. The hook is installed with the C API
//! rather than mlua's `set_hook`, because mlua hooks one Lua thread at a time and drops
//! the hook from any other: a loop inside a coroutine would never be stopped.
//! Set on the main state, the hook is inherited by every coroutine created from
//! it, as in Redis. The flag lives in a thread local because a Lua state, like
//! the script it runs, never leaves its thread.

use std::cell::{Cell, RefCell};
use std::sync::atomic::Ordering::Relaxed;
use std::sync::Arc;

use mlua::{ffi, Lua};

use super::Running;
use crate::clock::Stamp;

/// How often (in Lua instructions) a running script checks whether it was killed.
const HOOK_EVERY: i32 = 10_000;

/// How long a script runs on its loop before the loop goes on without it
/// ([`crate::offload::STEP_ASIDE_AFTER_NS`]). A script that runs longer holds
/// up its loop's other clients this long, plus up to [`HOOK_EVERY`]
/// instructions or one `redis.call`, whichever ends first.
const STEP_ASIDE_AFTER_NS: u64 = crate::offload::STEP_ASIDE_AFTER_NS;

/// What the hook raises once SCRIPT KILL asked.
pub(super) const KILLED: &str = "ERR Script killed by user with SCRIPT KILL...";

thread_local! {
    static CURRENT: RefCell<Option<Arc<Running>>> = const { RefCell::new(None) };
    /// When the script running on this thread started, on the server's fast
    /// counter: [`overdue`] reads it after every `redis.call`, where an OS clock
    /// read (`Running::started`) would wait for the call's cache misses.
    static STARTED: Cell<Option<Stamp>> = const { Cell::new(None) };
}

/// Whether the script running on this thread was asked to stop.
pub(super) fn killed() -> bool {
    CURRENT.with(|c| c.borrow().as_ref().is_some_and(|r| r.killed.load(Relaxed)))
}

/// Lets the loop of the script running on this thread go on without it, ahead
/// of work known to be long (a big allocation, a reply of many elements), which
/// the instruction hook would not see until it is over. Once the loop is gone,
/// or on a thread that never had one, this finds no loop and returns at once.
pub(super) fn step_aside() {
    // Nothing may unwind into Lua's C frames from here, whatever goes wrong in
    // the hand-over.
    let _ = std::panic::catch_unwind(crate::evloop::hand_over);
}

/// Lets the loop go on without the script running on this thread if the script
/// has run [`STEP_ASIDE_AFTER_NS`]: after each `redis.call`, since a script of many
/// long calls may make few Lua instructions.
pub(super) fn step_aside_if_overdue() {
    if overdue() {
        step_aside();
    }
}

/// Whether the script running on this thread has run long enough to let its
/// loop go on without it.
fn overdue() -> bool {
    STARTED
        .get()
        .is_some_and(|s| s.elapsed_ns() >= STEP_ASIDE_AFTER_NS)
}

/// Marks `running` as the script on this thread until the guard drops.
pub(super) fn enter(running: Arc<Running>) -> Entered {
    CURRENT.with(|c| *c.borrow_mut() = Some(running));
    STARTED.set(Some(Stamp::now()));
    Entered
}

pub(super) struct Entered;

impl Drop for Entered {
    fn drop(&mut self) {
        CURRENT.with(|c| *c.borrow_mut() = None);
        STARTED.set(None);
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
    if overdue() {
        step_aside();
    }
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
