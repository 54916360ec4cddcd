//! The whole system as one stateright [`Model`]: nodes, clients, the
//! messages between them (delivered in any order, late, or lost), time
//! that passes in steps of 1 ms, and nodes that restart empty or whose
//! clock jumps.

use stateright::{Model, Property};

use crate::algorithm::Verdict;
use crate::client::{self, Answer, Client, Phase};
use crate::node::{Broken, Node, Reply, Request};

/// Which primitive the clients use.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Kind {
    /// A lock.
    Lock,
    /// A lock with fencing tokens.
    FencedLock,
    /// A semaphore of this many permits: as many locks (its slots), a
    /// client trying any one of them.
    Semaphore(u8),
}

/// A deliberate defect, each of which a property must catch.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Mutation {
    /// A quorum of N/2 instead of N/2 + 1.
    HalfQuorum,
    /// A release that deletes the key without comparing the token.
    ReleaseWithoutTokenCheck,
    /// A semaphore that counts permits per node instead of holding K locks.
    PerNodeSemaphore,
    /// A fenced acquisition that does not refuse a stale proposal.
    NoStaleCheck,
    /// A vote counted during its node's quarantine.
    CountQuarantined,
}

/// The bounds and settings of one check.
#[derive(Clone, Debug)]
pub struct Config {
    /// The nodes (3 in the checks).
    pub nodes: usize,
    /// The clients.
    pub clients: usize,
    /// What they take.
    pub kind: Kind,
    /// Rounds each client may start.
    pub attempts: u8,
    /// The TTL, in ms (model time steps).
    pub ttl: u64,
    /// The drift factor, as the crate's setting.
    pub drift_factor: f64,
    /// How long a fence value stays after its last use.
    pub fence_idle: u64,
    /// Time stops here (the state space is finite).
    pub max_time: u64,
    /// Messages the network may lose.
    pub losses: u8,
    /// Node restarts (empty, no persistence).
    pub restarts: u8,
    /// Clock jumps.
    pub jumps: u8,
    /// The deliberate defect, if any.
    pub mutation: Option<Mutation>,
}

impl Config {
    /// 3 nodes, 2 clients with 2 rounds each, a 4 ms TTL, no faults.
    pub fn new(kind: Kind) -> Config {
        Config {
            nodes: 3,
            clients: 2,
            kind,
            attempts: 2,
            ttl: 3,
            drift_factor: 0.01,
            fence_idle: 12,
            max_time: 6,
            losses: 0,
            restarts: 0,
            jumps: 0,
            mutation: None,
        }
    }

    fn broken(&self) -> Broken {
        Broken {
            release_without_token_check: self.mutation == Some(Mutation::ReleaseWithoutTokenCheck),
            no_stale_check: self.mutation == Some(Mutation::NoStaleCheck),
            per_node_permits: match (self.mutation, self.kind) {
                (Some(Mutation::PerNodeSemaphore), Kind::Semaphore(k)) => Some(k),
                _ => None,
            },
        }
    }

    /// The restart quarantine and the clock rule's: the longest TTL.
    fn quarantine(&self) -> u64 {
        self.ttl
    }

    fn fenced(&self) -> bool {
        self.kind == Kind::FencedLock
    }
}

/// A request on its way from a client to a node. The node's answer
/// reaches the client as the node runs it, or never (see
/// [`Action::DeliverUnheard`]): a late answer changes nothing a lost one
/// and a client that stops waiting do not already cover, as a late answer
/// to a round already decided is dropped, and a round's clean-up, sent
/// when it is decided, may itself arrive at any time.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Message {
    /// The client.
    pub client: u8,
    /// The node.
    pub node: u8,
    /// What it asks.
    pub request: Request,
}

/// Everything at one moment.
#[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct State {
    /// Model time, in ms.
    pub now: u64,
    /// The nodes.
    pub nodes: Vec<Node>,
    /// The clients.
    pub clients: Vec<Client>,
    /// The messages on their way, sorted (their order means nothing).
    pub net: Vec<Message>,
    /// Faults used: losses, restarts, jumps.
    pub faults: [u8; 3],
    /// The largest fencing token granted so far.
    pub max_fence: Option<u64>,
    /// Whether a grant ever had a token no larger than an earlier one.
    pub fence_regressed: bool,
}

impl State {
    /// Sorts the messages: their order means nothing.
    fn prune(&mut self) {
        self.net.sort();
    }

    /// This state with its nodes renumbered by `to` (node `i` becomes node
    /// `to[i]`).
    fn renumbered(&self, to: &[u8]) -> State {
        let mut next = self.clone();
        for (i, node) in self.nodes.iter().enumerate() {
            next.nodes[usize::from(to[i])] = node.clone();
        }
        for (c, client) in next.clients.iter_mut().enumerate() {
            if let (Phase::Acquiring { answers: new, .. }, Phase::Acquiring { answers, .. }) =
                (&mut client.phase, &self.clients[c].phase)
            {
                for (i, answer) in answers.iter().enumerate() {
                    new[usize::from(to[i])] = *answer;
                }
            }
        }
        for m in &mut next.net {
            m.node = to[usize::from(m.node)];
        }
        next.net.sort();
        next
    }
}

/// The nodes are interchangeable: a state stands for all its renumberings,
/// and the checker keeps the least of them (symmetry reduction).
impl stateright::Representative for State {
    fn representative(&self) -> Self {
        let n = self.nodes.len() as u8;
        let mut best = self.clone();
        let mut to: Vec<u8> = (0..n).collect();
        permutations(&mut to, 0, &mut |to| {
            let candidate = self.renumbered(to);
            if candidate < best {
                best = candidate;
            }
        });
        best
    }
}

/// Calls `each` with every permutation of `items[from..]`.
fn permutations(items: &mut [u8], from: usize, each: &mut impl FnMut(&[u8])) {
    if from == items.len() {
        each(items);
        return;
    }
    for i in from..items.len() {
        items.swap(from, i);
        permutations(items, from + 1, each);
        items.swap(from, i);
    }
}

/// One step.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Action {
    /// 1 ms passes.
    Tick,
    /// A client starts a round for a slot.
    Start {
        /// The client.
        client: u8,
        /// The slot it tries.
        slot: u8,
    },
    /// The network delivers a request, and the node's answer.
    Deliver(Message),
    /// The network delivers a request and loses the node's answer.
    DeliverUnheard(Message),
    /// The network loses a message.
    Lose(Message),
    /// A client stops waiting: its pending nodes count as failed.
    GiveUp(u8),
    /// A holder releases.
    Release(u8),
    /// A node restarts empty.
    Restart(u8),
    /// A node's clock jumps ahead.
    Jump(u8),
}

/// The model: a [`Config`] explored by stateright.
#[derive(Clone, Debug)]
pub struct Redlock {
    /// Its bounds and settings.
    pub config: Config,
}

impl Redlock {
    /// Holders whose validity has not run out, as `(slot, fence)`.
    fn valid_holders(&self, state: &State) -> Vec<(u8, Option<u64>)> {
        state
            .clients
            .iter()
            .filter_map(|c| c.holds_validly(state.now))
            .collect()
    }

    fn slots(&self, client: u8) -> Vec<u8> {
        match (self.config.kind, self.config.mutation) {
            (Kind::Semaphore(_), Some(Mutation::PerNodeSemaphore)) => vec![client],
            (Kind::Semaphore(k), _) => (0..k).collect(),
            _ => vec![0],
        }
    }

    fn send_all(&self, state: &mut State, client: u8, request: Request) {
        for node in 0..self.config.nodes {
            state.net.push(Message {
                client,
                node: node as u8,
                request,
            });
        }
    }

    /// The client's round decided (or given up): hold, or clean up.
    fn settle(&self, state: &mut State, client: u8, give_up: bool) {
        let c = &state.clients[usize::from(client)];
        let token = c.token(client);
        let Phase::Acquiring {
            slot,
            start,
            fence,
            ref answers,
        } = c.phase
        else {
            return;
        };
        let answers = answers.clone();
        let quorum = (self.config.mutation == Some(Mutation::HalfQuorum))
            .then(|| (self.config.nodes / 2).max(1));
        let Some(verdict) = client::decide(&answers, self.config.fenced(), quorum, give_up) else {
            return;
        };
        let until = client::valid_until_us(start, self.config.ttl, self.config.drift_factor);
        if verdict == Verdict::Confirmed && state.now * 1000 < until {
            if let Some(f) = fence {
                state.fence_regressed |= state.max_fence.is_some_and(|m| f <= m);
                state.max_fence = state.max_fence.max(Some(f));
            }
            state.clients[usize::from(client)].phase = Phase::Holding {
                slot,
                valid_until_us: until,
                fence,
            };
            return;
        }
        let seen = client::stale_fence(&answers);
        let c = &mut state.clients[usize::from(client)];
        c.seen = c.seen.max(seen.unwrap_or(0));
        c.phase = Phase::Idle;
        self.send_all(state, client, Request::Release { slot, token });
    }

    /// The node runs the request; the client hears the answer if `heard`
    /// and it still waits for it.
    fn deliver(&self, state: &mut State, message: Message, heard: bool) {
        let Message {
            client,
            node,
            request,
        } = message;
        let n = &mut state.nodes[usize::from(node)];
        let reply = n.run(
            request,
            state.now,
            self.config.fence_idle,
            self.config.broken(),
        );
        let counts = n.counts(state.now, self.config.quarantine())
            || self.config.mutation == Some(Mutation::CountQuarantined);
        // Nobody waits for a release's answer.
        let Request::Acquire { token, .. } = request else {
            return;
        };
        let c = &mut state.clients[usize::from(client)];
        if !heard || c.attempts != token.attempt {
            return;
        }
        let Phase::Acquiring { answers, .. } = &mut c.phase else {
            return;
        };
        let answer = &mut answers[usize::from(node)];
        if *answer == Answer::Pending {
            *answer = match reply {
                Reply::Granted if !counts => Answer::Quarantined,
                _ => Answer::Replied(reply),
            };
            self.settle(state, client, false);
        }
    }
}

impl Model for Redlock {
    type State = State;
    type Action = Action;

    fn init_states(&self) -> Vec<State> {
        vec![State {
            now: 0,
            nodes: vec![Node::default(); self.config.nodes],
            clients: vec![Client::new(); self.config.clients],
            net: Vec::new(),
            faults: [0; 3],
            max_fence: None,
            fence_regressed: false,
        }]
    }

    fn actions(&self, state: &State, actions: &mut Vec<Action>) {
        let cfg = &self.config;
        if state.now < cfg.max_time {
            actions.push(Action::Tick);
        }
        for (i, c) in state.clients.iter().enumerate() {
            let client = i as u8;
            match c.phase {
                Phase::Idle if c.attempts < cfg.attempts => {
                    for slot in self.slots(client) {
                        actions.push(Action::Start { client, slot });
                    }
                }
                Phase::Acquiring { .. } => actions.push(Action::GiveUp(client)),
                Phase::Holding { .. } => actions.push(Action::Release(client)),
                Phase::Idle => {}
            }
        }
        let mut seen = None;
        for m in &state.net {
            if seen == Some(m) {
                continue;
            }
            seen = Some(m);
            actions.push(Action::Deliver(*m));
            if state.faults[0] < cfg.losses {
                actions.push(Action::Lose(*m));
                if let Request::Acquire { .. } = m.request {
                    actions.push(Action::DeliverUnheard(*m));
                }
            }
        }
        for node in 0..cfg.nodes as u8 {
            if state.faults[1] < cfg.restarts {
                actions.push(Action::Restart(node));
            }
            if state.faults[2] < cfg.jumps {
                actions.push(Action::Jump(node));
            }
        }
    }

    fn next_state(&self, last: &State, action: Action) -> Option<State> {
        let mut state = last.clone();
        match action {
            Action::Tick => state.now += 1,
            Action::Start { client, slot } => {
                let c = &mut state.clients[usize::from(client)];
                c.attempts += 1;
                // The crate's proposal: above every fence value seen, and
                // never below the wall clock (here model time, in µs).
                let fence = self
                    .config
                    .fenced()
                    .then(|| (state.now * 1000).max(c.seen + 1));
                c.phase = Phase::Acquiring {
                    slot,
                    start: state.now,
                    fence,
                    answers: vec![Answer::Pending; self.config.nodes],
                };
                let token = c.token(client);
                let ttl = self.config.ttl;
                self.send_all(
                    &mut state,
                    client,
                    Request::Acquire {
                        slot,
                        token,
                        ttl,
                        fence,
                    },
                );
            }
            Action::Deliver(m) | Action::DeliverUnheard(m) => {
                let at = state.net.iter().position(|x| *x == m)?;
                state.net.remove(at);
                let heard = matches!(action, Action::Deliver(_));
                state.faults[0] += u8::from(!heard);
                self.deliver(&mut state, m, heard);
            }
            Action::Lose(m) => {
                let at = state.net.iter().position(|x| *x == m)?;
                state.net.remove(at);
                state.faults[0] += 1;
            }
            Action::GiveUp(client) => self.settle(&mut state, client, true),
            Action::Release(client) => {
                let c = &mut state.clients[usize::from(client)];
                let Phase::Holding { slot, .. } = c.phase else {
                    return None;
                };
                let token = c.token(client);
                c.phase = Phase::Idle;
                self.send_all(&mut state, client, Request::Release { slot, token });
            }
            Action::Restart(node) => {
                state.nodes[usize::from(node)].restart(state.now);
                state.faults[1] += 1;
            }
            Action::Jump(node) => {
                state.nodes[usize::from(node)].jump(state.now);
                state.faults[2] += 1;
            }
        }
        state.prune();
        Some(state)
    }

    fn properties(&self) -> Vec<Property<Self>> {
        vec![
            Property::always(
                "a lock has at most one valid holder",
                |m: &Redlock, s: &State| {
                    let holders = m.valid_holders(s);
                    match m.config.kind {
                        Kind::Semaphore(_) => true,
                        _ => holders.len() <= 1,
                    }
                },
            ),
            Property::always(
                "a semaphore of K has at most K valid holders",
                |m: &Redlock, s: &State| match m.config.kind {
                    Kind::Semaphore(k) => m.valid_holders(s).len() <= usize::from(k),
                    _ => true,
                },
            ),
            Property::always("fencing tokens only grow", |_: &Redlock, s: &State| {
                !s.fence_regressed
            }),
            Property::sometimes("a client holds", |m: &Redlock, s: &State| {
                !m.valid_holders(s).is_empty()
            }),
        ]
    }
}
