//! The body encoding. bincode 2 lives here and nowhere else, so the encoding
//! can be swapped (postcard is the likely successor) by changing this file.

use std::fmt;
use std::marker::PhantomData;

use bincode::config::{Configuration, Limit, LittleEndian, Varint};
use serde::Serialize;
use serde::de::{
    DeserializeOwned, DeserializeSeed, Deserializer, EnumAccess, MapAccess, SeqAccess,
    VariantAccess, Visitor,
};

use crate::frame_size::MAX_FRAME_LIMIT;

/// Standard config (little-endian varints) with a hard decode limit so a
/// claimed container length can never allocate past the largest frame.
type Config = Configuration<LittleEndian, Varint, Limit<MAX_FRAME_LIMIT>>;

const CONFIG: Config = bincode::config::standard().with_limit::<MAX_FRAME_LIMIT>();

/// Appends the encoding of `value` to `out`.
pub(crate) fn encode_into<T: Serialize>(value: &T, out: &mut Vec<u8>) -> Result<(), String> {
    bincode::serde::encode_into_std_write(value, out, CONFIG)
        .map(|_| ())
        .map_err(|e| e.to_string())
}

/// Decodes exactly one value that must fill `bytes` completely.
///
/// Goes through [`Bounded`] so no allocation is sized by a length the body
/// merely claims: bincode's owned `String` decode allocates the claimed
/// length (up to the 64 MiB config limit) before it finds the bytes missing,
/// so a 10-byte frame could make a peer allocate 64 MiB.
pub(crate) fn decode_exact<T: DeserializeOwned>(bytes: &[u8]) -> Result<T, String> {
    let seed = Bounded::<T> {
        budget: bytes.len(),
        _value: PhantomData,
    };
    let (value, used) =
        bincode::serde::seed_decode_from_slice(seed, bytes, CONFIG).map_err(|e| e.to_string())?;
    if used != bytes.len() {
        return Err(format!(
            "{} trailing bytes after the message",
            bytes.len() - used
        ));
    }
    Ok(value)
}

/// Decodes a `T` from the start of `bytes`, ignoring whatever follows:
/// for reading the leading fields of a body that does not decode whole.
pub(crate) fn decode_prefix<T: DeserializeOwned>(bytes: &[u8]) -> Option<T> {
    let seed = Bounded::<T> {
        budget: bytes.len(),
        _value: PhantomData,
    };
    bincode::serde::seed_decode_from_slice(seed, bytes, CONFIG)
        .ok()
        .map(|(value, _)| value)
}

/// Seed that decodes a `T` through [`BoundedDe`].
struct Bounded<T> {
    budget: usize,
    _value: PhantomData<fn() -> T>,
}

impl<'de, T: DeserializeOwned> DeserializeSeed<'de> for Bounded<T> {
    type Value = T;

    fn deserialize<D: Deserializer<'de>>(self, de: D) -> Result<T, D::Error> {
        T::deserialize(BoundedDe {
            inner: de,
            budget: self.budget,
        })
    }
}

/// A deserializer wrapper that keeps allocation bounded by the body:
/// owned strings and byte buffers are read borrowed (bounds-checked against
/// the slice, then copied at their real size), and sequence size hints are
/// capped at the body length, since every element takes at least one byte.
/// Everything else is forwarded unchanged.
struct BoundedDe<D> {
    inner: D,
    budget: usize,
}

/// Wraps a visitor so the deserializers and accessors it is handed stay
/// bounded too.
struct BoundedVisitor<V> {
    inner: V,
    budget: usize,
}

/// Wraps a seed so nested values decode through [`BoundedDe`].
struct BoundedSeed<S> {
    inner: S,
    budget: usize,
}

/// Wraps a sequence, map or enum accessor.
struct BoundedAccess<A> {
    inner: A,
    budget: usize,
}

impl<V> BoundedVisitor<V> {
    fn new(inner: V, budget: usize) -> Self {
        Self { inner, budget }
    }
}

macro_rules! forward_deserialize {
    ($($method:ident($($arg:ident: $ty:ty),*);)*) => {
        $(
            #[inline]
            fn $method<V: Visitor<'de>>(self, $($arg: $ty,)* visitor: V) -> Result<V::Value, D::Error> {
                self.inner.$method($($arg,)* BoundedVisitor::new(visitor, self.budget))
            }
        )*
    };
}

impl<'de, D: Deserializer<'de>> Deserializer<'de> for BoundedDe<D> {
    type Error = D::Error;

    forward_deserialize! {
        deserialize_any();
        deserialize_bool();
        deserialize_i8();
        deserialize_i16();
        deserialize_i32();
        deserialize_i64();
        deserialize_i128();
        deserialize_u8();
        deserialize_u16();
        deserialize_u32();
        deserialize_u64();
        deserialize_u128();
        deserialize_f32();
        deserialize_f64();
        deserialize_char();
        deserialize_str();
        deserialize_bytes();
        deserialize_option();
        deserialize_unit();
        deserialize_unit_struct(name: &'static str);
        deserialize_newtype_struct(name: &'static str);
        deserialize_seq();
        deserialize_tuple(len: usize);
        deserialize_tuple_struct(name: &'static str, len: usize);
        deserialize_map();
        deserialize_struct(name: &'static str, fields: &'static [&'static str]);
        deserialize_enum(name: &'static str, variants: &'static [&'static str]);
        deserialize_identifier();
        deserialize_ignored_any();
    }

    /// Borrowed, so the length is checked against the slice before any copy.
    fn deserialize_string<V: Visitor<'de>>(self, visitor: V) -> Result<V::Value, D::Error> {
        self.inner
            .deserialize_str(BoundedVisitor::new(visitor, self.budget))
    }

    /// Borrowed, so the length is checked against the slice before any copy.
    fn deserialize_byte_buf<V: Visitor<'de>>(self, visitor: V) -> Result<V::Value, D::Error> {
        self.inner
            .deserialize_bytes(BoundedVisitor::new(visitor, self.budget))
    }

    fn is_human_readable(&self) -> bool {
        self.inner.is_human_readable()
    }
}

macro_rules! forward_visit {
    ($($method:ident($ty:ty);)*) => {
        $(
            #[inline]
            fn $method<E: serde::de::Error>(self, v: $ty) -> Result<Self::Value, E> {
                self.inner.$method(v)
            }
        )*
    };
}

impl<'de, V: Visitor<'de>> Visitor<'de> for BoundedVisitor<V> {
    type Value = V::Value;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        self.inner.expecting(f)
    }

    forward_visit! {
        visit_bool(bool);
        visit_i8(i8);
        visit_i16(i16);
        visit_i32(i32);
        visit_i64(i64);
        visit_i128(i128);
        visit_u8(u8);
        visit_u16(u16);
        visit_u32(u32);
        visit_u64(u64);
        visit_u128(u128);
        visit_f32(f32);
        visit_f64(f64);
        visit_char(char);
        visit_str(&str);
        visit_borrowed_str(&'de str);
        visit_string(String);
        visit_bytes(&[u8]);
        visit_borrowed_bytes(&'de [u8]);
        visit_byte_buf(Vec<u8>);
    }

    fn visit_none<E: serde::de::Error>(self) -> Result<Self::Value, E> {
        self.inner.visit_none()
    }

    fn visit_unit<E: serde::de::Error>(self) -> Result<Self::Value, E> {
        self.inner.visit_unit()
    }

    fn visit_some<D: Deserializer<'de>>(self, de: D) -> Result<Self::Value, D::Error> {
        self.inner.visit_some(BoundedDe {
            inner: de,
            budget: self.budget,
        })
    }

    fn visit_newtype_struct<D: Deserializer<'de>>(self, de: D) -> Result<Self::Value, D::Error> {
        self.inner.visit_newtype_struct(BoundedDe {
            inner: de,
            budget: self.budget,
        })
    }

    fn visit_seq<A: SeqAccess<'de>>(self, seq: A) -> Result<Self::Value, A::Error> {
        self.inner.visit_seq(BoundedAccess {
            inner: seq,
            budget: self.budget,
        })
    }

    fn visit_map<A: MapAccess<'de>>(self, map: A) -> Result<Self::Value, A::Error> {
        self.inner.visit_map(BoundedAccess {
            inner: map,
            budget: self.budget,
        })
    }

    fn visit_enum<A: EnumAccess<'de>>(self, data: A) -> Result<Self::Value, A::Error> {
        self.inner.visit_enum(BoundedAccess {
            inner: data,
            budget: self.budget,
        })
    }
}

impl<'de, S: DeserializeSeed<'de>> DeserializeSeed<'de> for BoundedSeed<S> {
    type Value = S::Value;

    #[inline]
    fn deserialize<D: Deserializer<'de>>(self, de: D) -> Result<S::Value, D::Error> {
        self.inner.deserialize(BoundedDe {
            inner: de,
            budget: self.budget,
        })
    }
}

impl<S> BoundedSeed<S> {
    fn new(inner: S, budget: usize) -> Self {
        Self { inner, budget }
    }
}

impl<'de, A: SeqAccess<'de>> SeqAccess<'de> for BoundedAccess<A> {
    type Error = A::Error;

    #[inline]
    fn next_element_seed<T: DeserializeSeed<'de>>(
        &mut self,
        seed: T,
    ) -> Result<Option<T::Value>, A::Error> {
        self.inner
            .next_element_seed(BoundedSeed::new(seed, self.budget))
    }

    /// A claimed length is only a claim: cap it at the body size, so
    /// `Vec::with_capacity(hint)` never reserves for elements that are not
    /// there.
    fn size_hint(&self) -> Option<usize> {
        self.inner.size_hint().map(|n| n.min(self.budget))
    }
}

impl<'de, A: MapAccess<'de>> MapAccess<'de> for BoundedAccess<A> {
    type Error = A::Error;

    fn next_key_seed<K: DeserializeSeed<'de>>(
        &mut self,
        seed: K,
    ) -> Result<Option<K::Value>, A::Error> {
        self.inner
            .next_key_seed(BoundedSeed::new(seed, self.budget))
    }

    fn next_value_seed<V: DeserializeSeed<'de>>(&mut self, seed: V) -> Result<V::Value, A::Error> {
        self.inner
            .next_value_seed(BoundedSeed::new(seed, self.budget))
    }

    fn size_hint(&self) -> Option<usize> {
        self.inner.size_hint().map(|n| n.min(self.budget))
    }
}

impl<'de, A: EnumAccess<'de>> EnumAccess<'de> for BoundedAccess<A> {
    type Error = A::Error;
    type Variant = BoundedAccess<A::Variant>;

    fn variant_seed<V: DeserializeSeed<'de>>(
        self,
        seed: V,
    ) -> Result<(V::Value, Self::Variant), A::Error> {
        let budget = self.budget;
        let (value, variant) = self.inner.variant_seed(BoundedSeed::new(seed, budget))?;
        Ok((
            value,
            BoundedAccess {
                inner: variant,
                budget,
            },
        ))
    }
}

impl<'de, A: VariantAccess<'de>> VariantAccess<'de> for BoundedAccess<A> {
    type Error = A::Error;

    fn unit_variant(self) -> Result<(), A::Error> {
        self.inner.unit_variant()
    }

    fn newtype_variant_seed<T: DeserializeSeed<'de>>(self, seed: T) -> Result<T::Value, A::Error> {
        self.inner
            .newtype_variant_seed(BoundedSeed::new(seed, self.budget))
    }

    fn tuple_variant<V: Visitor<'de>>(self, len: usize, visitor: V) -> Result<V::Value, A::Error> {
        self.inner
            .tuple_variant(len, BoundedVisitor::new(visitor, self.budget))
    }

    fn struct_variant<V: Visitor<'de>>(
        self,
        fields: &'static [&'static str],
        visitor: V,
    ) -> Result<V::Value, A::Error> {
        self.inner
            .struct_variant(fields, BoundedVisitor::new(visitor, self.budget))
    }
}
