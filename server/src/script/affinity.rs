//! Which loop a connection's scripts would rather run on.
//!
//! A script holds its keys' shards while it runs, so two loops running scripts
//! over one hot key take turns: one runs while the other spins on it or parks,
//! and the key's lines go back and forth between the cores. A script over one
//! key cost more than twice the CPU with two loops as with one loop serving
//! every client (`EVAL … 1 hot` at `-P 16`, 4 rounds: 10,100–11,200 ns a
//! request against 4,550–6,200). So a connection whose scripts keep finding a
//! shard held by another client's script moves, between two passes over its
//! requests, to the loop that shard calls home, as Dragonfly moves a
//! connection to the thread of its script's keys (`migrate_connections`).
//! (The other client is almost always on another loop: one loop runs one
//! command at a time, but for a script handed to a spare thread.) The home is
//! a function of the shard alone, the
//! same for every client: the clients of a hot key gather on one loop and stop
//! meeting across cores, and clients of two hot keys whose homes differ stay
//! spread over both. A streak is asked for, not one meeting: with keys spread
//! over the shards, a script meets another on its shards about once in
//! [`crate::db::SHARDS`], and a streak of them by chance next to never.
//!
//! This module keeps the streak, in the session; the loop asks
//! [`Affinity::wants_move`] after serving a connection, and decides where home
//! is and whether the connection can go now (see `evloop`).

/// How many scripts in a row, each over the same first shard, must find it held
/// by another client's script before their connection moves.
pub const STREAK: u32 = 4;

/// A connection's run of scripts that had to wait for another client's.
#[derive(Debug, Default)]
pub struct Affinity {
    /// The first (lowest) shard of the scripts in the streak.
    shard: usize,
    streak: u32,
}

impl Affinity {
    /// A script has started, or parked: `waited_on`, the shard another
    /// client's script held when it looked, if one did (`None` also when only a
    /// script over no shard or every shard did, which has no home).
    pub fn note(&mut self, waited_on: Option<usize>) {
        match waited_on {
            Some(shard) => {
                if self.streak == 0 || shard != self.shard {
                    self.shard = shard;
                    self.streak = 0;
                }
                self.streak = self.streak.saturating_add(1);
            }
            None => self.streak = 0,
        }
    }

    /// The shard whose home the connection should move to, once a streak is
    /// long enough.
    pub fn wants_move(&self) -> Option<usize> {
        (self.streak >= STREAK).then_some(self.shard)
    }

    /// It moved, or could not go where it asked: the streak starts again.
    pub fn clear(&mut self) {
        self.streak = 0;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_streak_on_one_shard_asks_for_a_move_once() {
        let mut a = Affinity::default();
        for _ in 0..STREAK - 1 {
            a.note(Some(7));
            assert_eq!(a.wants_move(), None);
        }
        a.note(Some(7));
        assert_eq!(a.wants_move(), Some(7));
        assert_eq!(a.wants_move(), Some(7), "asked until it moves");
        a.clear();
        assert_eq!(a.wants_move(), None, "the streak starts again");
    }

    #[test]
    fn a_script_that_found_its_shards_free_or_another_shard_held_breaks_the_streak() {
        let mut a = Affinity::default();
        for _ in 0..STREAK - 1 {
            a.note(Some(7));
        }
        a.note(None);
        a.note(Some(7));
        assert_eq!(a.wants_move(), None);

        // Alternating between two hot keys never settles on one home.
        for i in 0..10 * STREAK {
            a.note(Some(if i % 2 == 0 { 3 } else { 4 }));
            assert_eq!(a.wants_move(), None);
        }
    }
}
