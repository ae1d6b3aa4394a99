//! CPU lists in taskset/cpuset syntax: `1`, `0-3`, `0,2`, `0-1,4`.

use std::fmt;

/// Most CPUs a list may name; a bound on what a typo like `0-99999999` can allocate.
pub const CPU_COUNT_MAX: usize = 4096;

#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum CpuListError {
    #[error("empty CPU list")]
    Empty,
    #[error("bad CPU list element {0:?}: expected a number or a range like 0-3")]
    BadElement(String),
    #[error("bad CPU range {0:?}: the start is greater than the end")]
    Reversed(String),
    #[error("CPU {cpu} is beyond the supported maximum of {max}")]
    TooLarge { cpu: usize, max: usize },
    #[error("CPU {0} appears twice in the list")]
    Duplicate(usize),
    #[error("CPU {cpu} is not online (online CPUs: {online})")]
    Offline { cpu: usize, online: String },
}

/// An ordered list of distinct CPU ids; shard `i` runs on `cpus[i]`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct CpuList {
    cpus: Vec<usize>,
}

impl CpuList {
    /// Parses taskset syntax. Order is kept as written: `2,0` puts shard 0 on CPU 2.
    pub fn parse(text: &str) -> Result<CpuList, CpuListError> {
        let text = text.trim();
        if text.is_empty() {
            return Err(CpuListError::Empty);
        }
        let mut cpus = Vec::new();
        for element in text.split(',') {
            let element = element.trim();
            let (start, end) = match element.split_once('-') {
                Some((start, end)) => (parse_cpu(start, element)?, parse_cpu(end, element)?),
                None => {
                    let cpu = parse_cpu(element, element)?;
                    (cpu, cpu)
                }
            };
            if start > end {
                return Err(CpuListError::Reversed(element.to_string()));
            }
            for cpu in start..=end {
                if cpus.contains(&cpu) {
                    return Err(CpuListError::Duplicate(cpu));
                }
                cpus.push(cpu);
            }
        }
        assert!(!cpus.is_empty());
        Ok(CpuList { cpus })
    }

    /// All CPUs this process may run on (its affinity mask), in ascending order.
    pub fn online() -> CpuList {
        let mut cpus = Vec::new();
        // SAFETY: cpu_set_t is plain data; sched_getaffinity writes at most its size.
        unsafe {
            let mut set: libc::cpu_set_t = std::mem::zeroed();
            if libc::sched_getaffinity(0, std::mem::size_of::<libc::cpu_set_t>(), &mut set) == 0 {
                for cpu in 0..libc::CPU_SETSIZE as usize {
                    if libc::CPU_ISSET(cpu, &set) {
                        cpus.push(cpu);
                    }
                }
            }
        }
        if cpus.is_empty() {
            let count = std::thread::available_parallelism().map_or(1, |n| n.get());
            cpus.extend(0..count);
        }
        CpuList { cpus }
    }

    /// Checks every CPU in the list is one this process may run on.
    pub fn check_online(&self) -> Result<(), CpuListError> {
        let online = CpuList::online();
        for &cpu in &self.cpus {
            if !online.cpus.contains(&cpu) {
                return Err(CpuListError::Offline {
                    cpu,
                    online: online.to_string(),
                });
            }
        }
        Ok(())
    }

    pub fn cpus(&self) -> &[usize] {
        &self.cpus
    }

    pub fn len(&self) -> usize {
        self.cpus.len()
    }

    pub fn is_empty(&self) -> bool {
        self.cpus.is_empty()
    }
}

fn parse_cpu(text: &str, element: &str) -> Result<usize, CpuListError> {
    let text = text.trim();
    if text.is_empty() || !text.bytes().all(|b| b.is_ascii_digit()) {
        return Err(CpuListError::BadElement(element.to_string()));
    }
    let cpu: usize = text
        .parse()
        .map_err(|_| CpuListError::BadElement(element.to_string()))?;
    if cpu >= CPU_COUNT_MAX {
        return Err(CpuListError::TooLarge {
            cpu,
            max: CPU_COUNT_MAX - 1,
        });
    }
    Ok(cpu)
}

impl fmt::Display for CpuList {
    /// Compact taskset form: consecutive ascending runs become ranges.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let mut index = 0;
        let mut first = true;
        while index < self.cpus.len() {
            let start = self.cpus[index];
            let mut end = start;
            while index + 1 < self.cpus.len() && self.cpus[index + 1] == end + 1 {
                index += 1;
                end += 1;
            }
            if !first {
                f.write_str(",")?;
            }
            first = false;
            if start == end {
                write!(f, "{start}")?;
            } else {
                write!(f, "{start}-{end}")?;
            }
            index += 1;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_taskset_forms() {
        assert_eq!(CpuList::parse("1").unwrap().cpus(), &[1]);
        assert_eq!(CpuList::parse("0-3").unwrap().cpus(), &[0, 1, 2, 3]);
        assert_eq!(CpuList::parse("0,2").unwrap().cpus(), &[0, 2]);
        assert_eq!(CpuList::parse(" 0-1, 4 ").unwrap().cpus(), &[0, 1, 4]);
        assert_eq!(CpuList::parse("2,0").unwrap().cpus(), &[2, 0]);
    }

    #[test]
    fn rejects_bad_lists() {
        assert_eq!(CpuList::parse(""), Err(CpuListError::Empty));
        assert!(matches!(
            CpuList::parse("a"),
            Err(CpuListError::BadElement(_))
        ));
        assert!(matches!(
            CpuList::parse("1-"),
            Err(CpuListError::BadElement(_))
        ));
        assert!(matches!(
            CpuList::parse("-1"),
            Err(CpuListError::BadElement(_))
        ));
        assert!(matches!(
            CpuList::parse("1,,2"),
            Err(CpuListError::BadElement(_))
        ));
        assert_eq!(
            CpuList::parse("3-1"),
            Err(CpuListError::Reversed("3-1".into()))
        );
        assert_eq!(CpuList::parse("1,1"), Err(CpuListError::Duplicate(1)));
        assert!(matches!(
            CpuList::parse("0-99999999"),
            Err(CpuListError::TooLarge { .. })
        ));
    }

    #[test]
    fn displays_compactly() {
        assert_eq!(
            CpuList::parse("0,1,2,5,7-8").unwrap().to_string(),
            "0-2,5,7-8"
        );
        assert_eq!(CpuList::parse("3").unwrap().to_string(), "3");
    }

    #[test]
    fn online_is_not_empty() {
        assert!(!CpuList::online().is_empty());
        CpuList::online().check_online().unwrap();
    }
}
