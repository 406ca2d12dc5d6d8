//! Saving and loading (`.npy` for one array, `.safetensors` for named arrays with string
//! metadata), and the two string-keyed maps the safetensors calls use.

use crate::array::{array, kiln_array, set_array};
use crate::error::{c_error, status};
use crate::handle::{boxed, free, handles, put, set, value};
use crate::string::text;
use kiln::Array;
use std::ffi::{c_char, c_int, c_void, CString};

/// Named arrays, in insertion order.
#[repr(C)]
#[derive(Clone, Copy)]
pub struct kiln_map_string_to_array {
    pub ctx: *mut c_void,
}

/// Named strings (a safetensors file's metadata), in insertion order.
#[repr(C)]
#[derive(Clone, Copy)]
pub struct kiln_map_string_to_string {
    pub ctx: *mut c_void,
}

/// The entries of a map, in insertion order, with their keys as C strings (which `key_at` lends).
pub(crate) struct Map<V> {
    entries: Vec<(CString, V)>,
}

impl<V> Map<V> {
    fn new() -> Map<V> {
        Map { entries: Vec::new() }
    }
    /// Inserts or replaces the value of `key`.
    fn insert(&mut self, key: &str, v: V) {
        let key = CString::new(key).expect("keys come from C strings");
        match self.entries.iter_mut().find(|(k, _)| *k == key) {
            Some(e) => e.1 = v,
            None => self.entries.push((key, v)),
        }
    }
    fn get(&self, key: &str) -> kiln::Result<&V> {
        self.entries
            .iter()
            .find(|(k, _)| k.to_str() == Ok(key))
            .map(|(_, v)| v)
            .ok_or_else(|| c_error("", format!("the map has no key {key:?}")))
    }
    fn key_at(&self, index: usize) -> kiln::Result<*const c_char> {
        self.entries
            .get(index)
            .map(|(k, _)| k.as_ptr())
            .ok_or_else(|| c_error("", format!("index {index} is out of range for a map of {} entries", self.entries.len())))
    }
    fn pairs(&self) -> impl Iterator<Item = (String, &V)> {
        self.entries.iter().map(|(k, v)| (k.to_string_lossy().into_owned(), v))
    }
}

handles!(kiln_map_string_to_array => Map<Array>, kiln_map_string_to_string => Map<CString>);

/// A new, empty map of arrays.
#[no_mangle]
pub extern "C" fn kiln_map_string_to_array_new() -> kiln_map_string_to_array {
    boxed(Map::new())
}

/// Sets `key` to `a`.
#[no_mangle]
pub unsafe extern "C" fn kiln_map_string_to_array_insert(map: kiln_map_string_to_array, key: *const c_char, a: kiln_array) -> c_int {
    status("kiln_map_string_to_array_insert", || {
        let (key, a) = unsafe { (text(key, "key")?, array(a, "a")?) };
        unsafe { value(map, "map") }?.insert(key, a);
        Ok(())
    })
}

/// The array of `key`.
#[no_mangle]
pub unsafe extern "C" fn kiln_map_string_to_array_get(res: *mut kiln_array, map: kiln_map_string_to_array, key: *const c_char) -> c_int {
    status("kiln_map_string_to_array_get", || {
        let a = unsafe { value(map, "map")?.get(text(key, "key")?)?.clone() };
        unsafe { set_array(res, a) }
    })
}

/// The number of entries.
#[no_mangle]
pub unsafe extern "C" fn kiln_map_string_to_array_size(res: *mut usize, map: kiln_map_string_to_array) -> c_int {
    status("kiln_map_string_to_array_size", || unsafe { put(res, value(map, "map")?.entries.len(), "res") })
}

/// The key of entry `index` (in insertion order), valid while the map lives.
#[no_mangle]
pub unsafe extern "C" fn kiln_map_string_to_array_key_at(res: *mut *const c_char, map: kiln_map_string_to_array, index: usize) -> c_int {
    status("kiln_map_string_to_array_key_at", || unsafe { put(res, value(map, "map")?.key_at(index)?, "res") })
}

/// Frees a map handle (an empty one is ignored).
#[no_mangle]
pub unsafe extern "C" fn kiln_map_string_to_array_free(map: kiln_map_string_to_array) -> c_int {
    status("kiln_map_string_to_array_free", || {
        unsafe { free(map) };
        Ok(())
    })
}

/// A new, empty map of strings.
#[no_mangle]
pub extern "C" fn kiln_map_string_to_string_new() -> kiln_map_string_to_string {
    boxed(Map::new())
}

/// Sets `key` to a copy of `val`.
#[no_mangle]
pub unsafe extern "C" fn kiln_map_string_to_string_insert(map: kiln_map_string_to_string, key: *const c_char, val: *const c_char) -> c_int {
    status("kiln_map_string_to_string_insert", || {
        let (key, val) = unsafe { (text(key, "key")?, text(val, "val")?) };
        unsafe { value(map, "map") }?.insert(key, CString::new(val).expect("a C string holds no NUL"));
        Ok(())
    })
}

/// The string of `key`, valid while the map lives.
#[no_mangle]
pub unsafe extern "C" fn kiln_map_string_to_string_get(res: *mut *const c_char, map: kiln_map_string_to_string, key: *const c_char) -> c_int {
    status("kiln_map_string_to_string_get", || unsafe { put(res, value(map, "map")?.get(text(key, "key")?)?.as_ptr(), "res") })
}

/// The number of entries.
#[no_mangle]
pub unsafe extern "C" fn kiln_map_string_to_string_size(res: *mut usize, map: kiln_map_string_to_string) -> c_int {
    status("kiln_map_string_to_string_size", || unsafe { put(res, value(map, "map")?.entries.len(), "res") })
}

/// The key of entry `index` (in insertion order), valid while the map lives.
#[no_mangle]
pub unsafe extern "C" fn kiln_map_string_to_string_key_at(res: *mut *const c_char, map: kiln_map_string_to_string, index: usize) -> c_int {
    status("kiln_map_string_to_string_key_at", || unsafe { put(res, value(map, "map")?.key_at(index)?, "res") })
}

/// Frees a map handle (an empty one is ignored).
#[no_mangle]
pub unsafe extern "C" fn kiln_map_string_to_string_free(map: kiln_map_string_to_string) -> c_int {
    status("kiln_map_string_to_string_free", || {
        unsafe { free(map) };
        Ok(())
    })
}

/// Saves `a` to `file` in numpy's `.npy` format.
#[no_mangle]
pub unsafe extern "C" fn kiln_save(file: *const c_char, a: kiln_array) -> c_int {
    status("kiln_save", || unsafe { kiln::io::save_npy(text(file, "file")?, &array(a, "a")?) })
}

/// Loads a `.npy` file: its header now, its data when the array is evaluated (as
/// `kiln::io::load_npy`).
#[no_mangle]
pub unsafe extern "C" fn kiln_load(res: *mut kiln_array, file: *const c_char) -> c_int {
    status("kiln_load", || {
        let file = unsafe { text(file, "file") }?;
        if file.ends_with(".safetensors") {
            return Err(c_error("", format!("{file} holds named arrays: load it with kiln_load_safetensors")));
        }
        unsafe { set_array(res, kiln::io::load_npy(file)?) }
    })
}

/// Saves named arrays and string metadata (`metadata` may be an empty handle) to `file` in the
/// `.safetensors` format.
#[no_mangle]
pub unsafe extern "C" fn kiln_save_safetensors(file: *const c_char, arrays: kiln_map_string_to_array, metadata: kiln_map_string_to_string) -> c_int {
    status("kiln_save_safetensors", || {
        let file = unsafe { text(file, "file") }?;
        let arrays: Vec<(String, Array)> = unsafe { value(arrays, "arrays") }?.pairs().map(|(k, v)| (k, v.clone())).collect();
        let metadata: Vec<(String, String)> = match unsafe { value(metadata, "metadata") } {
            Ok(m) => m.pairs().map(|(k, v)| (k, v.to_string_lossy().into_owned())).collect(),
            Err(_) => Vec::new(),
        };
        kiln::io::save_safetensors(file, &arrays, &metadata)
    })
}

/// Loads a `.safetensors` file: its arrays into `*res_0`, its metadata into `*res_1`.
#[no_mangle]
pub unsafe extern "C" fn kiln_load_safetensors(res_0: *mut kiln_map_string_to_array, res_1: *mut kiln_map_string_to_string, file: *const c_char) -> c_int {
    status("kiln_load_safetensors", || {
        let loaded = kiln::io::load_safetensors(unsafe { text(file, "file") }?)?;
        let mut arrays = Map::new();
        for (k, a) in loaded.arrays {
            arrays.insert(&k, a);
        }
        let mut metadata = Map::new();
        for (k, v) in loaded.metadata {
            metadata.insert(&k, CString::new(v).map_err(|_| c_error("", format!("metadata {k:?} holds a NUL")))?);
        }
        unsafe {
            set(res_0, arrays)?;
            set(res_1, metadata)
        }
    })
}
