//! Comparing what the peer answered with what the model says it must.
//!
//! - NAKs, RNR NAKs, READ responses and atomic ACKs must be exactly the model's, in its
//!   order, each once (IBA 9.7.5.1.2: one sequence-error NAK; a READ's responses are not
//!   coalesced).
//! - Positive ACKs may be coalesced (IBA 9.7.5.1.1): each ACK seen must match one the
//!   model allows (PSN and MSN), in order, and the last one the rules require must be
//!   answered by it, a later one, or a NAK after it.

use crate::model::Answer;
use rnic_wire::aeth::Syndrome;
use rnic_wire::opcode::Opcode;
use rnic_wire::roce::RoceRepr;

/// What a packet from the peer says, as an [`Answer`].
pub fn answer_of(repr: &RoceRepr, payload: &[u8]) -> Answer {
    let (psn, op) = (repr.bth.psn, repr.bth.opcode);
    let aeth = repr.ext.aeth;
    match op {
        Opcode::RC_ACKNOWLEDGE => match aeth.map(|a| (a.syndrome, a.msn)) {
            Some((Syndrome::Ack { .. }, msn)) => Answer::Ack { lo: psn, hi: psn, msn, required: false },
            Some((Syndrome::Nak(code), msn)) => Answer::Nak { psn, code, msn },
            Some((Syndrome::RnrNak { .. }, msn)) => Answer::Rnr { psn, msn },
            Some((s, _)) => Answer::Unexpected(format!("ACK psn={:#08x} with a reserved syndrome {s}", psn.value())),
            None => Answer::Unexpected("ACK without an AETH".into()),
        },
        Opcode::RC_RDMA_READ_RESPONSE_FIRST
        | Opcode::RC_RDMA_READ_RESPONSE_MIDDLE
        | Opcode::RC_RDMA_READ_RESPONSE_LAST
        | Opcode::RC_RDMA_READ_RESPONSE_ONLY => {
            Answer::Read { opcode: op, psn, msn: aeth.map(|a| a.msn), data: payload.to_vec() }
        }
        Opcode::RC_ATOMIC_ACKNOWLEDGE => match repr.ext.atomic_ack_eth {
            Some(a) => Answer::Atomic { psn, orig: a.orig_remote_data },
            None => Answer::Unexpected("ATOMIC_ACKNOWLEDGE without its header".into()),
        },
        other => Answer::Unexpected(format!("{} psn={:#08x}", other.name(), psn.value())),
    }
}

fn is_ack(a: &Answer) -> bool {
    matches!(a, Answer::Ack { .. })
}

/// Whether `seen` is the answer `want` describes.
pub fn matches(want: &Answer, seen: &Answer) -> bool {
    match (want, seen) {
        (Answer::Ack { lo, hi, msn, .. }, Answer::Ack { lo: p, msn: m, .. }) => {
            lo.distance(*p) >= 0 && p.distance(*hi) >= 0 && msn == m
        }
        (Answer::Read { opcode, psn, msn, data }, Answer::Read { opcode: o, psn: p, msn: m, data: d }) => {
            opcode == o && psn == p && data == d && msn.is_none_or(|x| m == &Some(x))
        }
        (Answer::NakOneOf { psn, codes, msn }, Answer::Nak { psn: p, code, msn: m }) => {
            psn == p && msn == m && codes.contains(code)
        }
        (Answer::OneOf(v), s) => v.iter().any(|w| matches(w, s)),
        (w, s) => w == s,
    }
}

fn list(v: &[&Answer]) -> String {
    if v.is_empty() {
        return "nothing".into();
    }
    v.iter().map(|a| a.to_string()).collect::<Vec<_>>().join("; ")
}

/// `Ok` when `seen` is a conforming answer to what produced `want`; else what differs.
pub fn judge(want: &[Answer], seen: &[Answer]) -> Result<(), String> {
    let w: Vec<&Answer> = want.iter().filter(|a| !is_ack(a)).collect();
    let s: Vec<&Answer> = seen.iter().filter(|a| !is_ack(a)).collect();
    if w.len() != s.len() || w.iter().zip(&s).any(|(a, b)| !matches(a, b)) {
        let acks: Vec<&Answer> = seen.iter().filter(|a| is_ack(a)).collect();
        let observed = if s.is_empty() && !acks.is_empty() {
            // A request the rules refuse, acknowledged instead: say so, not "nothing".
            format!("only ACKs: {}", list(&acks))
        } else {
            list(&s)
        };
        return Err(format!("expected {}, observed {observed}", list(&w)));
    }
    let wa: Vec<&Answer> = want.iter().filter(|a| is_ack(a)).collect();
    let mut at = 0;
    let mut reached: Option<usize> = None;
    for a in seen.iter().filter(|a| is_ack(a)) {
        // An ACK the same as the one before it (a duplicate's, acknowledged again) is the
        // next one the rules allow before it is the same one again.
        let next = reached.map_or(at, |k| k + 1);
        match (next..wa.len()).find(|&k| matches(wa[k], a)).or_else(|| (at..wa.len()).find(|&k| matches(wa[k], a))) {
            Some(k) => {
                at = k;
                reached = Some(k);
            }
            None => {
                let allowed: Vec<&Answer> = wa.get(at..).unwrap_or(&[]).to_vec();
                return Err(format!(
                    "{a} acknowledges nothing the rules allow at that point (allowed: {})",
                    list(&allowed)
                ));
            }
        }
    }
    // A NAK or RNR NAK also acknowledges every request before its PSN (IBA 9.7.5.1.1,
    // the requester's view in 9.7.5.2: a NAK's PSN is the first request not done).
    for a in seen {
        if let Answer::Nak { psn, .. } | Answer::Rnr { psn, .. } = a {
            if let Some(k) = wa.iter().rposition(|w| matches!(w, Answer::Ack { hi, .. } if hi.distance(*psn) > 0)) {
                reached = reached.max(Some(k));
            }
        }
    }
    let required = wa.iter().rposition(|a| matches!(a, Answer::Ack { required: true, .. }));
    if let Some(r) = required {
        if reached.is_none_or(|k| k < r) {
            let seen_acks: Vec<&Answer> = seen.iter().filter(|a| is_ack(a)).collect();
            return Err(format!(
                "expected {} (or a later ACK covering it), observed ACKs: {}",
                wa[r],
                list(&seen_acks)
            ));
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use rnic_wire::aeth::NakCode;
    use rnic_wire::Psn;

    fn ack(p: u32, msn: u32, required: bool) -> Answer {
        Answer::Ack { lo: Psn::new(p), hi: Psn::new(p), msn, required }
    }

    #[test]
    fn coalesced_acks_pass_and_missing_or_wrong_ones_do_not() {
        let want = [ack(1, 1, false), ack(2, 2, true), ack(3, 3, true)];
        assert!(judge(&want, &[ack(3, 3, false)]).is_ok());
        assert!(judge(&want, &[ack(1, 1, false), ack(2, 2, false), ack(3, 3, false)]).is_ok());
        assert!(judge(&want, &[ack(2, 2, false)]).unwrap_err().contains("ACK psn=0x000003"));
        assert!(judge(&want, &[ack(3, 2, false)]).unwrap_err().contains("acknowledges nothing"));
        assert!(judge(&want, &[]).is_err());
    }

    #[test]
    fn a_duplicate_acknowledged_again_passes() {
        // A WRITE, its duplicate: two ACKs with the same PSN and MSN, both required.
        let want = [ack(5, 3, true), ack(5, 3, true)];
        assert!(judge(&want, &[ack(5, 3, false), ack(5, 3, false)]).is_ok());
        assert!(judge(&want, &[ack(5, 3, false)]).is_err());
    }

    #[test]
    fn a_nak_sent_twice_diverges() {
        let nak = Answer::Nak { psn: Psn::new(5), code: NakCode::PsnSequenceError, msn: 0 };
        assert!(judge(std::slice::from_ref(&nak), std::slice::from_ref(&nak)).is_ok());
        let e = judge(std::slice::from_ref(&nak), &[nak.clone(), nak.clone()]).unwrap_err();
        assert!(e.contains("observed NAK PSN_SEQUENCE_ERROR psn=0x000005 msn=0; NAK"), "{e}");
    }

    #[test]
    fn a_refused_request_acknowledged_instead_is_named() {
        let nak = Answer::Nak { psn: Psn::new(9), code: NakCode::InvalidRequest, msn: 0 };
        let e = judge(std::slice::from_ref(&nak), &[ack(9, 0, false)]).unwrap_err();
        assert_eq!(e, "expected NAK INVALID_REQUEST psn=0x000009 msn=0, observed only ACKs: ACK psn=0x000009 msn=0 (may be coalesced)");
        let e = judge(std::slice::from_ref(&nak), &[]).unwrap_err();
        assert!(e.ends_with("observed nothing"), "{e}");
    }

    #[test]
    fn either_nak_of_a_double_violation_passes_and_no_other() {
        let want = [Answer::NakOneOf {
            psn: Psn::new(4),
            codes: vec![NakCode::RemoteAccessError, NakCode::InvalidRequest],
            msn: 2,
        }];
        let nak = |code| Answer::Nak { psn: Psn::new(4), code, msn: 2 };
        assert!(judge(&want, &[nak(NakCode::RemoteAccessError)]).is_ok());
        assert!(judge(&want, &[nak(NakCode::InvalidRequest)]).is_ok());
        assert!(judge(&want, &[nak(NakCode::RemoteOperationalError)]).is_err());
        assert!(judge(&want, &[nak(NakCode::InvalidRequest), nak(NakCode::InvalidRequest)]).is_err());
    }
}
